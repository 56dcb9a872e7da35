"""Inter-process messages (ZMQ + msgpack)."""

from .base import decode, encode, message
from .messages import (
    AbortMsg, DetokenizeInfoMsg, ExitMsg, Reply, ReplyBatchMsg, SchedulerStatsMsg, TokenBatchMsg, TokenizeMsg,
    UserMsg,
)

__all__ = ["decode", "encode", "message", "AbortMsg", "DetokenizeInfoMsg", "ExitMsg", "Reply", "ReplyBatchMsg",
           "SchedulerStatsMsg", "TokenBatchMsg", "TokenizeMsg", "UserMsg"]
