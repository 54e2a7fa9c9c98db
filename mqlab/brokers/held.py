"""The read-ahead buffer of a prefetching receiver (NATS, Redis): what it holds, and what
it handed out unacked.

``take`` hands out at most ``max_messages`` in arrival order. A delivery held longer than
``hold_s`` must not be handed out (the broker's redelivery timer runs from delivery: that
late, it could reach another receiver as well): ``stale`` drops those, and the receiver
does so before each ``take`` that follows a call to the broker (``take`` alone is only
used when ``has_stale`` said no). ``acked`` accepts only deliveries handed out and not
acked yet, as often as they were handed out (an entry read again after a failure is
handed out again: one ack each): a held delivery cannot be acked.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Sequence

from mqlab.brokers.base import Delivery


class Held:
    """Deliveries read ahead of ``receive``; ``key`` names a delivery for its ack (the
    driver's handle, or a part of it)."""

    def __init__(self, hold_s: float, key: Callable[[Delivery], Hashable] = lambda d: d.handle):
        self.hold_s = hold_s
        self.key = key
        self.items: deque[tuple[float, Delivery]] = deque()  # (arrived, delivery)
        self.out: Counter[Hashable] = Counter()  # handed out, unacked -> how often

    def __len__(self) -> int:
        return len(self.items)

    def add(self, deliveries: Iterable[Delivery], now: float) -> None:
        self.items.extend((now, d) for d in deliveries)

    def has_stale(self, now: float) -> bool:
        return bool(self.items) and now - self.items[0][0] > self.hold_s

    def stale(self, now: float) -> list[Delivery]:
        """The deliveries held longer than ``hold_s``, now dropped."""
        dropped = []
        while self.has_stale(now):
            dropped.append(self.items.popleft()[1])
        return dropped

    def take(self, max_messages: int) -> list[Delivery]:
        """Up to ``max_messages`` deliveries to hand out, oldest first."""
        got = [self.items.popleft()[1] for _ in range(min(max_messages, len(self.items)))]
        self.out.update(self.key(d) for d in got)
        return got

    def acked(self, deliveries: Sequence[Delivery]) -> tuple[list[Delivery], int]:
        """The deliveries that may be acked now (in order), and how many may not."""
        ok = []
        for d in deliveries:
            k = self.key(d)
            if self.out[k] > 0:
                self.out[k] -= 1
                if not self.out[k]:
                    del self.out[k]
                ok.append(d)
        return ok, len(deliveries) - len(ok)

    def drop(self) -> list[Delivery]:
        """Every delivery held (never handed out), now dropped."""
        dropped = [d for _, d in self.items]
        self.items.clear()
        return dropped
