"""Reasoning parsers: split a reasoning model's `<think>…</think>` from its answer, streamed too."""

from __future__ import annotations

from dataclasses import dataclass


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper start of `marker` (held back while
    streaming: the next piece may complete the marker)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


@dataclass
class ThinkParser:
    """Qwen3 / DeepSeek-R1 style: the output starts with `<think>`, reasoning runs to `</think>`,
    the answer follows. Output that does not start with `<think>` is all answer (Qwen3 with
    enable_thinking false: the template closed an empty think block in the prompt)."""

    start: str = "<think>"
    end: str = "</think>"
    opened_by_template: bool = False  # the prompt ends inside <think>: output starts as reasoning

    def __post_init__(self) -> None:
        self.buffer = ""
        self.state = "reasoning" if self.opened_by_template else "undecided"  # -> reasoning -> answer
        self.strip = True  # newlines right after a marker are layout, not text

    def feed(self, text: str, final: bool = False) -> tuple[str, str]:
        """New (reasoning, answer) text for the next piece of output."""
        self.buffer += text
        reasoning = answer = ""
        if self.state == "undecided":
            head = self.buffer.lstrip()
            if head.startswith(self.start):
                self.state, self.buffer = "reasoning", head[len(self.start):]
            elif self.start.startswith(head) and not final:
                return "", ""  # could still become <think>
            else:
                self.state = "answer"
        if self.strip:
            self.buffer = self.buffer.lstrip("\n")
            self.strip = not self.buffer
        if self.state == "reasoning":
            at = self.buffer.find(self.end)
            if at == -1:
                keep = 0 if final else _partial_suffix(self.buffer, self.end)
                reasoning, self.buffer = self.buffer[: len(self.buffer) - keep], self.buffer[len(self.buffer) - keep:]
                return reasoning, ""
            reasoning, self.buffer = self.buffer[:at].rstrip("\n"), self.buffer[at + len(self.end):].lstrip("\n")
            self.state, self.strip = "answer", not self.buffer
        if self.state == "answer":
            answer, self.buffer = self.buffer, ""
        return reasoning, answer


# --reasoning-parser's names are minisgl.utils.choices.REASONING_PARSERS; the same here.
REASONING_PARSERS = {"qwen3": ThinkParser, "deepseek_r1": ThinkParser}
