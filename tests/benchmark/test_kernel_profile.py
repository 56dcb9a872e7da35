"""The kernel profile's idle-time account: what the GPU did between kernels, from their spans."""

import pytest

from minisgl.benchmark.kernel_profile import idle_time


def test_idle_time_is_the_span_less_the_union_of_kernels_and_names_the_kernel_after_each_gap():
    kernels = [  # (start us, end us, name), out of order as a profiler may list them
        (30.0, 40.0, "c"),
        (0.0, 10.0, "a"),
        (8.0, 12.0, "b"),  # overlaps a (a programmatic dependent launch)
        (45.0, 50.0, "a"),
        (12.0, 20.0, "c"),  # starts as b ends: no gap
    ]
    idle = idle_time(kernels, steps=1)
    assert idle.span_us == 50.0
    assert idle.busy_us == 20.0 + 10.0 + 5.0
    assert idle.idle_us == 15.0
    assert idle.kernel_us == 10 + 4 + 8 + 10 + 5
    assert idle.idle_before == [("c", 10.0), ("a", 5.0)]


def test_idle_time_is_per_step_and_keeps_the_largest_gaps():
    kernels = [(i * 10.0, i * 10.0 + 4.0, f"k{i}") for i in range(10)]  # gaps of 6 us before k1..k9
    idle = idle_time(kernels, steps=2, top=3)
    assert idle.span_us == pytest.approx(94.0 / 2)
    assert idle.busy_us == pytest.approx(40.0 / 2)
    assert idle.idle_us == pytest.approx(54.0 / 2)
    assert len(idle.idle_before) == 3 and all(us == pytest.approx(3.0) for _, us in idle.idle_before)


def test_no_kernels_is_no_time():
    idle = idle_time([], steps=4)
    assert (idle.span_us, idle.busy_us, idle.kernel_us, idle.idle_before) == (0.0, 0.0, 0.0, [])
