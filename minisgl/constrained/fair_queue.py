"""The queue of grammar compiles waiting for a worker, fair between clients: each client has its
own first-in-first-out line, and the workers take from the lines in turn (round robin), so a
client flooding slow schemas waits behind its own compiles, not others behind them. A client is
whatever name the API server gives it (its address); a compile that several clients asked for
waits in the first one's line."""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    """Round robin between clients' lines: each line is due at a round; the earliest due goes
    next, then is due a round later. A client's new line is due at the round now being served,
    so it goes before the lines that already had their turn in it, and an idle client banks no
    turns for later. A client whose line ran empty on its turn keeps that turn taken: its next
    item, queued before the round is over, waits for the others (its compile is still running)."""

    def __init__(self) -> None:
        self._lines: dict[str, deque[T]] = {}  # non-empty only
        self._due: dict[str, int] = {}  # clients with a line, and those whose line ran empty ahead of the round
        self._round = 0  # of the last item taken

    def append(self, item: T, client: str = "") -> None:
        if client not in self._lines:
            self._lines[client], self._due[client] = deque(), max(self._due.get(client, self._round), self._round)
        self._lines[client].append(item)

    def popleft(self) -> T:
        """The next item of the client whose turn it is (the earliest due; ties by arrival)."""
        if not self._lines:
            raise IndexError("pop from an empty queue")
        client = min(self._lines, key=self._due.__getitem__)
        line, self._round = self._lines[client], self._due[client]
        item = line.popleft()
        self._due[client] += 1
        if not line:
            del self._lines[client]  # its due stays: the turn it just had counts in this round
        for idle in [c for c, due in self._due.items() if c not in self._lines and due <= self._round]:
            del self._due[idle]  # no longer ahead of the round: as if never seen
        return item

    def queued(self, client: str) -> int:
        """How many of `client`'s items wait."""
        return len(self._lines.get(client, ()))

    def remove(self, item: T) -> None:
        for client, line in self._lines.items():
            if item in line:
                line.remove(item)
                if not line:
                    self._drop(client)
                return
        raise ValueError("not queued")

    def clear(self) -> None:
        self._lines.clear()
        self._due.clear()

    def _drop(self, client: str) -> None:
        del self._lines[client], self._due[client]  # (removed, not served: no turn taken)

    def __contains__(self, item: object) -> bool:
        return any(item in line for line in self._lines.values())

    def __len__(self) -> int:
        return sum(map(len, self._lines.values()))

    def __bool__(self) -> bool:
        return bool(self._lines)
