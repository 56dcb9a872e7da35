"""Stop strings matched in time linear in the generated text.

Each stop string has a Knuth-Morris-Pratt matcher fed every new character once: its state is the
length of the longest end of the text so far that begins the stop string. That one number says
both whether the stop string has just appeared (state == its length) and how much of the text's
end must be held back because it may still become the stop string. Re-searching the whole text, or
comparing every prefix of every stop string with the text's end, per token is quadratic (long
stop strings then cost milliseconds per token)."""

from __future__ import annotations

from array import array
from functools import lru_cache


@lru_cache(maxsize=256)  # the n choices of a request (and most requests) share their stop strings
def _failure(pattern: str) -> array:
    """fail[i]: length of the longest proper prefix of pattern[:i + 1] that is also its suffix."""
    fail, k = array("i", bytes(4 * len(pattern))), 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = fail[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        fail[i] = k
    return fail


class _Matcher:
    __slots__ = ("pattern", "fail", "state")

    def __init__(self, pattern: str) -> None:
        self.pattern, self.fail, self.state = pattern, _failure(pattern), 0

    def feed(self, ch: str) -> bool:
        """Advance over one character; True when the pattern ends at it."""
        pattern, k = self.pattern, self.state
        if k == len(pattern):
            k = self.fail[k - 1]
        while k and pattern[k] != ch:
            k = self.fail[k - 1]
        if pattern[k] == ch:
            k += 1
        self.state = k
        return k == len(pattern)


class StopStrings:
    """Watches a text growing at its end for the first occurrence of any stop string."""

    def __init__(self, stops: list[str]) -> None:
        self.matchers = [_Matcher(s) for s in dict.fromkeys(s for s in stops if s)]
        self.length = 0  # characters seen
        self.found_at: int | None = None  # where the earliest-starting stop string begins

    def __bool__(self) -> bool:
        return bool(self.matchers)

    def feed(self, text: str) -> None:
        """More text. The first character that completes a stop string decides, whatever the
        tokens: of the stop strings ending there, the one that starts first (the longest) wins."""
        if not self.matchers or self.found_at is not None:
            self.length += len(text)
            return
        found = None
        for i, ch in enumerate(text, start=self.length):
            for m in self.matchers:
                if m.feed(ch):
                    start = i - len(m.pattern) + 1
                    found = start if found is None else min(found, start)
            if found is not None:
                break
        self.length += len(text)
        self.found_at = found

    def undecided(self) -> int:
        """How many characters at the end of the text may still be the start of a stop string."""
        return max((m.state for m in self.matchers), default=0)
