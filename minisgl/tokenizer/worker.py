"""The tokenizer and detokenizer worker processes."""

from __future__ import annotations

from transformers import AutoTokenizer

from minisgl.message import (
    AbortMsg,
    DetokenizeInfoMsg,
    ExitMsg,
    LoraUpdateMsg,
    Reply,
    ReplyBatchMsg,
    TokenBatchMsg,
    TokenizedRequestMsg,
    TokenizeMsg,
    merge_by_request,
)
from minisgl.message.sockets import PullSocket, PushSocket
from minisgl.utils.liveness import WorkerLink
from minisgl.utils.logger import get_logger
from minisgl.utils.process import ParentWatch, run_worker

from .chat_template import encode_chat_text, render_chat_text
from .detokenizer import Detokenizer
from .prompt_bound import PromptLimit, PromptTooLong

logger = get_logger(__name__)

PROMPT_TAIL = 4  # prompt tokens given to the detokenizer so the first output token is spaced right


def encode_request(tokenizer, msg: TokenizeMsg, limit: PromptLimit | None = None) -> list[int]:
    """The prompt's token ids; PromptTooLong, before tokenizing, when `limit` refuses its text's
    size (a chat's as its template renders it)."""
    if msg.input_ids is not None:
        return list(msg.input_ids)
    text = msg.text or "" if msg.messages is None else render_chat_text(tokenizer, msg.messages,
                                                                        msg.text_params.template)
    problem = limit.check_bytes(text) if limit is not None else None
    if problem:
        raise PromptTooLong(problem)
    return tokenizer.encode(text) if msg.messages is None else encode_chat_text(tokenizer, text)


class RepeatedPrompt:
    """The choices of one request (n > 1) reach a tokenizer one after another with the same
    prompt: it is tokenized (or its chat template rendered) once, not once per choice."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.ids: list[int] = []

    def encode(self, tokenizer, msg: TokenizeMsg, limit: PromptLimit | None = None) -> list[int]:
        if msg.input_ids is not None:
            return list(msg.input_ids)
        key = (msg.text, msg.messages, msg.text_params.template)
        if key != self.key:
            self.key, self.ids = None, encode_request(tokenizer, msg, limit)  # a failure leaves nothing stale
            self.key = key
        return self.ids


def prompt_tail(tokenizer, ids: list[int]) -> list[int]:
    """The prompt's last tokens as decoding context, unless they end inside a UTF-8 character
    (then the decoder could not tell the prompt's text from the output's)."""
    tail = ids[-PROMPT_TAIL:]
    if any(not 0 <= t < len(tokenizer) for t in tail):
        return []  # the scheduler rejects such ids with a clear message
    return [] if "\ufffd" in tokenizer.decode(tail) else tail


def run_tokenizer(model_path: str, addrs: dict[str, str], link: WorkerLink, chat_template: str | None = None,
                  max_prompt_tokens: int | None = None) -> None:
    """`chat_template`: replaces the tokenizer's own (--chat-template). `max_prompt_tokens`: longer
    prompts are refused here, from their byte size when that proves it (no tokenizing megabytes)."""
    def body(ready):
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if chat_template:
            tokenizer.chat_template = chat_template
        limit = PromptLimit(max_prompt_tokens, tokenizer.backend_tokenizer)
        repeated = RepeatedPrompt()
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
                if isinstance(msg, LoraUpdateMsg):  # its outcome comes back as a request's end
                    to_detok.send(DetokenizeInfoMsg(msg.uid))
                    to_scheduler.send(msg)
                    continue
                try:
                    try:
                        ids = repeated.encode(tokenizer, msg, limit)
                        problem = limit.check_tokens(len(ids))
                    except PromptTooLong as e:
                        ids, problem = [], str(e)
                    if problem:
                        to_api.send(ReplyBatchMsg([Reply(msg.uid, "", 0, "error", problem)]))
                        continue
                    info = DetokenizeInfoMsg(msg.uid, msg.text_params.stop, msg.text_params.skip_special_tokens,
                                             prompt_tail(tokenizer, ids))
                except Exception as e:  # a bad request must never take the worker down
                    to_api.send(ReplyBatchMsg([Reply(msg.uid, "", 0, "error", f"cannot tokenize: {e}")]))
                    continue
                to_detok.send(info)
                to_scheduler.send(TokenizedRequestMsg(msg.uid, ids, msg.params))
                logger.debug("request %d: %d prompt tokens sent to the scheduler", msg.uid, len(ids))

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
