"""`--shell`: chat with the model in the terminal. Tokens stream as they come; /reset clears the
history; /exit or Ctrl-D leaves."""

from __future__ import annotations

from prompt_toolkit import PromptSession
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.patch_stdout import patch_stdout

HELP = "Type a message. Commands: /reset clears the conversation, /exit (or Ctrl-D) leaves."


async def chat_shell(client, workers) -> int:
    session: PromptSession = PromptSession(history=InMemoryHistory())
    history: list[dict] = []
    print(HELP, flush=True)
    while True:
        try:
            with patch_stdout():
                line = await session.prompt_async("> ")
        except (EOFError, KeyboardInterrupt):
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
        answer = ""
        async for reply in client.generate({"temperature": 0.7, "max_tokens": 512}, messages=history):
            if reply.finish_reason == "error":
                print(f"\nerror: {reply.error}", flush=True)
                history.pop()
                break
            answer += reply.text
            print(reply.text, end="", flush=True)
        else:
            history.append({"role": "assistant", "content": answer})
        print(flush=True)
