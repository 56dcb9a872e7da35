"""Continuous batching with chunked prefill and prefix caching, over one Engine."""

from .config import SchedulerConfig
from .scheduler import Scheduler, SchedulerStats, StepOutput

__all__ = ["Scheduler", "SchedulerConfig", "SchedulerStats", "StepOutput"]
