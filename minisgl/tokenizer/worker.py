"""The tokenizer and detokenizer worker processes."""

from __future__ import annotations

from multiprocessing.queues import Queue

from transformers import AutoTokenizer

from minisgl.message import (
    AbortMsg, DetokenizeInfoMsg, ExitMsg, Reply, ReplyBatchMsg, TokenBatchMsg, TokenizeMsg, UserMsg,
)
from minisgl.utils.logger import get_logger
from minisgl.utils.process import ParentWatch, run_worker
from minisgl.utils.zmq import PullSocket, PushSocket

from .chat_template import render_chat
from .detokenize import IncrementalDetokenizer

logger = get_logger(__name__)
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


def run_tokenizer(model_path: str, addrs: dict[str, str], status: Queue, chat_template: str | None = None) -> None:
    """`chat_template`: replaces the tokenizer's own (--chat-template)."""
    def body(ready):
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if chat_template:
            tokenizer.chat_template = chat_template
        inbox = PullSocket(addrs["tokenizer"])
        to_scheduler, to_detok, to_api = (PushSocket(addrs[n]) for n in ("scheduler", "detokenizer", "api"))
        watch = ParentWatch()
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
                    to_api.send(ReplyBatchMsg([vars(Reply(msg.uid, "", 0, "error", f"cannot tokenize: {e}"))]))
                    continue
                to_detok.send(info)
                to_scheduler.send(UserMsg(msg.uid, ids, msg.params))

    run_worker("tokenizer", status, body)


def run_detokenizer(model_path: str, addrs: dict[str, str], status: Queue) -> None:
    def body(ready):
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        backend = tokenizer.backend_tokenizer
        inbox = PullSocket(addrs["detokenizer"])
        to_api, to_scheduler = PushSocket(addrs["api"]), PushSocket(addrs["scheduler"])
        states: dict[int, IncrementalDetokenizer] = {}
        counts: dict[int, int] = {}
        early: dict[int, list[dict]] = {}  # outputs that overtook their request's DetokenizeInfoMsg
        failed: set[int] = set()  # requests whose detokenization broke: their later outputs are dropped
        watch = ParentWatch()
        ready()

        def piece(token_id: int) -> str:  # one token's own text, as logprobs name it
            return backend.decode([token_id], skip_special_tokens=False)

        def handle(out: dict, replies: list[dict]) -> None:
            uid, reason = out["uid"], out["finish_reason"]
            if uid in failed:
                if reason:
                    failed.discard(uid)
                return
            state = states.get(uid)
            if state is None:
                early.setdefault(uid, []).append(out)
                return
            if state.stopped:  # a stop string already ended it for the client
                if reason:
                    del states[uid], counts[uid]
                return
            text, logprobs = "", None
            if out["token_id"] is not None:
                counts[uid] += 1
                text = state.add(out["token_id"])
                if out.get("logprob") is not None:
                    logprobs = [[piece(out["token_id"]), out["logprob"],
                                 [[piece(i), lp] for i, lp in out["top_logprobs"]]]]
            if state.stopped:
                if reason is None:
                    to_scheduler.send(AbortMsg(uid))  # the scheduler is still generating: stop it
                reason = "stop"
            if reason:
                text += state.finish()
            replies.append(vars(Reply(uid, text, counts[uid], reason, out.get("error"), out.get("prompt_tokens", 0),
                                      logprobs)))
            if reason and not (state.stopped and out["finish_reason"] is None):
                del states[uid], counts[uid]

        def handle_safely(out: dict, replies: list[dict]) -> None:
            """One request's failure must not end the others': it ends with an error, and the
            scheduler is told to stop generating for it."""
            try:
                handle(out, replies)
            except Exception as e:
                uid = out["uid"]
                logger.exception("detokenizing request %d failed", uid)
                states.pop(uid, None)
                counts.pop(uid, None)
                if out["finish_reason"] is None:
                    failed.add(uid)
                    to_scheduler.send(AbortMsg(uid))
                replies.append(vars(Reply(uid, "", 0, "error", f"detokenization failed: {e}")))

        while watch.alive():
            msgs = inbox.recv_all(timeout_ms=200)
            replies: list[dict] = []
            for msg in msgs:
                if isinstance(msg, ExitMsg):
                    return
                if isinstance(msg, DetokenizeInfoMsg):
                    states[msg.uid] = IncrementalDetokenizer(backend, msg.stop, msg.skip_special_tokens, msg.prompt_tail)
                    counts[msg.uid] = 0
                    for out in early.pop(msg.uid, []):
                        handle_safely(out, replies)
                elif isinstance(msg, TokenBatchMsg):
                    for out in msg.outputs:
                        handle_safely(out, replies)
            if replies:
                to_api.send(ReplyBatchMsg(replies))

    run_worker("detokenizer", status, body)
