"""`--shell`: chat with the model in the terminal. Tokens stream as they come; Ctrl-C stops the
answer being written (the request is aborted, the shell stays); /reset clears the history; /exit
or Ctrl-D leaves. Sampling: --shell-temperature and --shell-max-tokens."""

from __future__ import annotations

import asyncio
import signal

from prompt_toolkit import PromptSession
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.patch_stdout import patch_stdout

from minisgl.core.params import SamplingParams

from .runtime.frontend import UNAVAILABLE

HELP = ("Type a message. Ctrl-C stops an answer. Commands: /reset clears the conversation, "
        "/exit (or Ctrl-D) leaves.")


class AnswerFailed(Exception):
    pass


async def _answer(client, params: SamplingParams, history: list[dict]) -> str:
    """Stream one answer to the terminal; its text."""
    answer = ""
    async for reply in client.generate(params, messages=history):
        if reply.finish_reason in ("error", UNAVAILABLE):
            raise AnswerFailed(reply.error)
        answer += reply.text
        print(reply.text, end="", flush=True)
    return answer


async def _interruptible(coro) -> tuple[bool, object]:
    """Run `coro` with Ctrl-C (SIGINT) cancelling it instead of the shell: (finished, result).
    While an answer streams the terminal is in its normal mode, so Ctrl-C is a signal; at the
    prompt, prompt_toolkit reads it as a key."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro)
    loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        await asyncio.wait({task})
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    if task.cancelled():
        return False, None
    return True, task.result()


async def chat_shell(client, workers, temperature: float = 0.7, max_tokens: int = 512) -> int:
    session: PromptSession = PromptSession(history=InMemoryHistory())
    history: list[dict] = []
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens)
    print(HELP, flush=True)
    while True:
        try:
            with patch_stdout():
                line = await session.prompt_async("> ")
        except KeyboardInterrupt:  # Ctrl-C at the prompt drops the line, as a shell does
            continue
        except EOFError:
            print()
            return 0
        line = line.strip()
        if not line:
            continue
        if line == "/exit":
            return 0
        if line == "/reset":
            history.clear()
            print("(conversation cleared)", flush=True)
            continue
        if workers.dead():
            print(f"error: worker {workers.dead()} died", flush=True)
            return 1
        history.append({"role": "user", "content": line})
        try:
            finished, answer = await _interruptible(_answer(client, params, history))
        except AnswerFailed as e:
            print(f"\nerror: {e}", flush=True)
            history.pop()
            continue
        if finished:
            history.append({"role": "assistant", "content": answer})
            print(flush=True)
        else:  # the half-written answer is not kept: the next question starts from the last full turn
            history.pop()
            print("\n(answer cancelled)", flush=True)
