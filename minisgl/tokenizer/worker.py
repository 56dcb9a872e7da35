"""The tokenizer and detokenizer worker processes."""

from __future__ import annotations

from transformers import AutoTokenizer

from minisgl.message import (
    AbortMsg, DetokenizeInfoMsg, ExitMsg, Reply, ReplyBatchMsg, TokenBatchMsg, TokenizeMsg, UserMsg,
    merge_by_request,
)
from minisgl.utils.liveness import WorkerLink
from minisgl.utils.process import ParentWatch, run_worker
from minisgl.utils.zmq import PullSocket, PushSocket

from .chat_template import render_chat
from .detokenizer import Detokenizer

PROMPT_TAIL = 4  # prompt tokens given to the detokenizer so the first output token is spaced right


def encode_request(tokenizer, msg: TokenizeMsg) -> list[int]:
    if msg.input_ids is not None:
        return list(msg.input_ids)
    if msg.messages is not None:
        return render_chat(tokenizer, msg.messages, msg.params.get("template"))
    return tokenizer.encode(msg.text or "")


def prompt_tail(tokenizer, ids: list[int]) -> list[int]:
    """The prompt's last tokens as decoding context, unless they end inside a UTF-8 character
    (then the decoder could not tell the prompt's text from the output's)."""
    tail = ids[-PROMPT_TAIL:]
    if any(not 0 <= t < len(tokenizer) for t in tail):
        return []  # the scheduler rejects such ids with a clear message
    return [] if "\ufffd" in tokenizer.decode(tail) else tail


def run_tokenizer(model_path: str, addrs: dict[str, str], link: WorkerLink, chat_template: str | None = None) -> None:
    """`chat_template`: replaces the tokenizer's own (--chat-template)."""
    def body(ready):
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if chat_template:
            tokenizer.chat_template = chat_template
        inbox = PullSocket(addrs[link.name])
        to_scheduler, to_detok, to_api = (PushSocket(addrs[n]) for n in ("scheduler", "detokenizer", "api"))
        watch = ParentWatch(link.heartbeat)
        ready()
        while watch.alive():
            for msg in inbox.recv_all(timeout_ms=200):
                if isinstance(msg, ExitMsg):
                    return
                if isinstance(msg, AbortMsg):
                    to_scheduler.send(msg)
                    continue
                try:
                    ids = encode_request(tokenizer, msg)
                    info = DetokenizeInfoMsg(msg.uid, list(msg.params.get("stop") or []),
                                             msg.params.get("skip_special_tokens", True), prompt_tail(tokenizer, ids))
                except Exception as e:  # a bad request must never take the worker down
                    to_api.send(ReplyBatchMsg([Reply(msg.uid, "", 0, "error", f"cannot tokenize: {e}")]))
                    continue
                to_detok.send(info)
                to_scheduler.send(UserMsg(msg.uid, ids, msg.params))

    run_worker(link, body)


def run_detokenizer(model_path: str, addrs: dict[str, str], link: WorkerLink) -> None:
    def body(ready):
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        inbox = PullSocket(addrs["detokenizer"])
        to_api, to_scheduler = PushSocket(addrs["api"]), PushSocket(addrs["scheduler"])
        detokenizer = Detokenizer(tokenizer.backend_tokenizer, to_scheduler.send)
        watch = ParentWatch(link.heartbeat)
        ready()
        while watch.alive():
            replies: list[Reply] = []
            for msg in inbox.recv_all(timeout_ms=200):
                if isinstance(msg, ExitMsg):
                    return
                if isinstance(msg, DetokenizeInfoMsg):
                    detokenizer.on_info(msg, replies)
                elif isinstance(msg, TokenBatchMsg):
                    for out in msg.outputs:
                        detokenizer.on_output(out, replies)
            if replies:
                to_api.send(ReplyBatchMsg(merge_by_request(replies)))

    run_worker(link, body)
