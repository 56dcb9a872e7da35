"""Inter-process messages (ZMQ + msgpack)."""

from .base import decode, encode, message
from .messages import (
    AbortMsg, DetokenizeInfoMsg, ExitMsg, Reply, ReplyBatchMsg, SchedulerStatsMsg, StepOutput, TokenBatchMsg,
    TextParams, TokenizeMsg, UserMsg, merge_by_request, merge_replies,
)

__all__ = ["decode", "encode", "message", "AbortMsg", "DetokenizeInfoMsg", "ExitMsg", "Reply", "ReplyBatchMsg",
           "SchedulerStatsMsg", "StepOutput", "TextParams", "TokenBatchMsg", "TokenizeMsg", "UserMsg",
           "merge_by_request", "merge_replies"]
