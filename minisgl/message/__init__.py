"""Inter-process messages: the dataclasses the processes send each other (`messages`, which draws
the whole process graph), their msgpack codec (`base`) and the ZMQ PUSH/PULL sockets that carry
them (`sockets`)."""

from .base import decode, encode, message
from .messages import (
    AbortMsg,
    DetokenizeInfoMsg,
    ExitMsg,
    LoraUpdateMsg,
    Reply,
    ReplyBatchMsg,
    SchedulerStatsMsg,
    StepOutput,
    TextParams,
    TokenBatchMsg,
    TokenizedRequestMsg,
    TokenizeMsg,
    merge_by_request,
    merge_replies,
)

__all__ = ["decode", "encode", "message", "AbortMsg", "DetokenizeInfoMsg", "ExitMsg", "LoraUpdateMsg", "Reply",
           "ReplyBatchMsg",
           "SchedulerStatsMsg", "StepOutput", "TextParams", "TokenBatchMsg", "TokenizeMsg", "TokenizedRequestMsg",
           "merge_by_request", "merge_replies"]
