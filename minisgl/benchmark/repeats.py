"""A figure measured several times: every value, and the summary a difference is read against.

The spread is (max - min) / mean: a change smaller than it is not told apart from the run-to-run
noise of the same burst. The ratio of two measurements is the ratio of their means.
"""

from __future__ import annotations

import statistics


def repeat_summary(values: list[float]) -> dict:
    """runs, every value in order, mean, min, max, spread ((max - min) / mean) and the coefficient
    of variation (population standard deviation / mean); spread and CV are None for a mean of 0."""
    if not values:
        raise ValueError("no values to summarize")
    mean = statistics.fmean(values)
    low, high = min(values), max(values)
    return {"runs": len(values), "values": list(values), "mean": mean, "min": low, "max": high,
            "spread": (high - low) / mean if mean else None,
            "cv": statistics.pstdev(values) / mean if mean else None}


def ratio_of_means(a: dict, b: dict) -> float | None:
    """a's mean over b's, for two repeat_summary results (None when b's mean is 0)."""
    return a["mean"] / b["mean"] if b["mean"] else None
