"""Benchmark results: a JSON file and a PNG plot next to it."""

from __future__ import annotations

import json
import os
import platform


def device_name() -> str:
    import torch  # not at import: the benchmarks' client processes import this module's users

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


def bar_plot(path: str, title: str, labels: list[str], values: list[float], ylabel: str, fmt: str = "%.0f") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    bars = ax.bar(labels, values, color=["#4C72B0", "#DD8452", "#55A868", "#C44E52"][: len(values)])
    ax.bar_label(bars, fmt=fmt)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
