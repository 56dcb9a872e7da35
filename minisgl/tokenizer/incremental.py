"""Incremental detokenization with stop strings.

Text is produced with the tokenizers library's DecodeStream, which holds back bytes until they
form valid UTF-8, so a stream never shows a replacement character for a split multi-byte
character. Stop strings are cut out: text that might be the start of a stop string is held back
until it is clear it is not (minisgl.tokenizer.stop_strings, linear in the text).
"""

from __future__ import annotations

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from .stop_strings import StopStrings


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, stop: list[str], skip_special_tokens: bool, prompt_tail: list[int]):
        self.tokenizer = tokenizer
        self.stream = DecodeStream(ids=prompt_tail or None, skip_special_tokens=skip_special_tokens)
        self.skip_special_tokens = skip_special_tokens
        self.prompt_tail = prompt_tail
        self.ids: list[int] = []
        self.stops = StopStrings(stop)
        self.pieces: list[str] = []  # everything decoded so far (joined once, at the end)
        self.held = ""  # decoded but not handed out yet: at most the longest stop string's length
        self.sent = 0  # characters handed out
        self.stopped = False

    def add(self, token_id: int) -> str:
        """Feed one token; return the new text that is safe to show."""
        self.ids.append(token_id)
        piece = self.stream.step(self.tokenizer, token_id)
        if piece:
            self._append(piece)
        return self._release(final=False)

    def finish(self) -> str:
        """The request ended: whatever was held back is final, including bytes that never
        completed a character (shown as U+FFFD, exactly as a one-shot decode shows them)."""
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)  # noqa: E731
        whole = decode(self.prompt_tail + self.ids)[len(decode(self.prompt_tail)):]
        text = "".join(self.pieces)
        if len(whole) > len(text) and whole.startswith(text):
            self._append(whole[len(text):])
        return self._release(final=True)

    @property
    def matched_stop(self) -> str | None:
        """The stop string that ended the text (the longest of those starting there); None while none has."""
        if not self.stopped:
            return None
        rest = "".join(self.pieces)[self.stops.found_at:]
        return max((m.pattern for m in self.stops.matchers if rest.startswith(m.pattern)), key=len, default=None)

    @property
    def text_before_stop(self) -> str | None:
        """The whole text decoded before the stop string that ended it; None while none has."""
        return "".join(self.pieces)[: self.stops.found_at] if self.stopped else None

    def _append(self, piece: str) -> None:
        self.pieces.append(piece)
        self.held += piece
        self.stops.feed(piece)

    def _release(self, final: bool) -> str:
        """Hand out what can no longer be part of a stop string. Text already handed out never
        holds the start of one (it would have been held back), so only `held` is looked at."""
        if self.stopped:
            return ""
        end = self.stops.length
        if self.stops.found_at is not None:
            end, self.stopped = max(self.sent, self.stops.found_at), True
        elif not final:
            end -= self.stops.undecided()
        out, self.held = self.held[: end - self.sent], self.held[end - self.sent :]
        self.sent = end
        return out
