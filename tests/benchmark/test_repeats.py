"""A figure measured several times is summarized by every value, its mean, min and max, the spread
(max - min) / mean and the coefficient of variation; two figures compare by the ratio of their means."""

from __future__ import annotations

import numpy as np
import pytest

from minisgl.benchmark.repeats import ratio_of_means, repeat_summary


def test_the_summary_keeps_every_value_and_matches_numpy():
    values = [20_100.0, 19_400.0, 21_050.0, 20_600.0]
    s = repeat_summary(values)
    a = np.asarray(values)
    assert s["values"] == values and s["runs"] == 4
    assert (s["mean"], s["min"], s["max"]) == pytest.approx((a.mean(), a.min(), a.max()))
    assert s["spread"] == pytest.approx(np.ptp(a) / a.mean())
    assert s["cv"] == pytest.approx(a.std() / a.mean())


def test_one_run_has_no_spread():
    s = repeat_summary([5.0])
    assert (s["mean"], s["min"], s["max"], s["spread"], s["cv"]) == (5.0, 5.0, 5.0, 0.0, 0.0)


def test_a_mean_of_zero_has_no_relative_spread_and_nothing_to_divide_by():
    zero = repeat_summary([0.0, 0.0])
    assert zero["spread"] is None and zero["cv"] is None
    assert ratio_of_means(repeat_summary([1.0]), zero) is None


def test_nothing_measured_is_refused():
    with pytest.raises(ValueError, match="no values"):
        repeat_summary([])


def test_two_figures_compare_by_their_means():
    server, engine = repeat_summary([18.0, 20.0, 22.0]), repeat_summary([21.0, 19.0])
    assert ratio_of_means(server, engine) == pytest.approx(np.mean([18, 20, 22]) / np.mean([21, 19]))
