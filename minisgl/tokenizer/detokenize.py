"""Incremental detokenization with stop strings.

Text is produced with the tokenizers library's DecodeStream, which holds back bytes until they
form valid UTF-8, so a stream never shows a replacement character for a split multi-byte
character. Stop strings are cut out: text that might be the start of a stop string is held back
until it is clear it is not.
"""

from __future__ import annotations

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, stop: list[str], skip_special_tokens: bool, prompt_tail: list[int]):
        self.tokenizer = tokenizer
        self.stream = DecodeStream(ids=prompt_tail or None, skip_special_tokens=skip_special_tokens)
        self.skip_special_tokens = skip_special_tokens
        self.prompt_tail = prompt_tail
        self.ids: list[int] = []
        self.stop = [s for s in stop if s]
        self.text = ""  # everything decoded so far
        self.sent = 0  # characters of `text` already handed out
        self.stopped = False

    def add(self, token_id: int) -> str:
        """Feed one token; return the new text that is safe to show."""
        self.ids.append(token_id)
        piece = self.stream.step(self.tokenizer, token_id)
        if piece:
            self.text += piece
        return self._release(final=False)

    def finish(self) -> str:
        """The request ended: whatever was held back is final, including bytes that never
        completed a character (shown as U+FFFD, exactly as a one-shot decode shows them)."""
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)  # noqa: E731
        whole = decode(self.prompt_tail + self.ids)[len(decode(self.prompt_tail)):]
        if whole.startswith(self.text):
            self.text = whole
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if self.stopped:
            return ""
        end = len(self.text)
        for s in self.stop:
            at = self.text.find(s, max(0, self.sent - len(s) + 1))
            if at != -1 and at < end:
                end, self.stopped = at, True
        if not self.stopped and not final and self.stop:
            end = max(self.sent, end - self._partial_stop_suffix())
        out = self.text[self.sent : end]
        self.sent = end
        return out

    def _partial_stop_suffix(self) -> int:
        """Length of the longest end of `text` that is a proper prefix of some stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:n]):
                    best = max(best, n)
                    break
        return best
