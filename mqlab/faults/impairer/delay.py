"""The impairment and its scheduler (pure): each packet dropped or released at its own
time, as netem would."""

from __future__ import annotations

import heapq
import json
import math
import random
from dataclasses import asdict, dataclass, field

from .common import FleetError


# -- the impairment and its scheduler (pure) ----------------------------------------------
@dataclass(frozen=True)
class Impairment:
    """What happens to each packet: lost with probability ``loss_pct`` %, else released
    after a delay uniform in ``[delay_ms - jitter_ms, delay_ms + jitter_ms]``, clamped at 0."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0

    def __post_init__(self) -> None:
        for name in ("delay_ms", "jitter_ms", "loss_pct"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise FleetError(f"impair: {name} = {value!r}: must be a number >= 0")
        if self.loss_pct > 100:
            raise FleetError(f"impair: loss_pct = {self.loss_pct!r}: must be <= 100")

    def describe(self) -> str:
        return f"delay {self.delay_ms:g} ms jitter {self.jitter_ms:g} ms loss {self.loss_pct:g} %"


def draw(impairment: Impairment, rng: random.Random) -> int | None:
    """One packet's fate: None (dropped) or its delay in ns.

    Draws from ``rng`` in this order, so that a seed replays: ``rng.random()`` for the
    loss (only if ``loss_pct > 0``; dropped when below ``loss_pct / 100``), then
    ``rng.uniform(delay - jitter, delay + jitter)`` (only for a kept packet and
    ``jitter_ms > 0``)."""
    if impairment.loss_pct > 0 and rng.random() < impairment.loss_pct / 100.0:
        return None
    delay_ms = impairment.delay_ms
    if impairment.jitter_ms > 0:
        delay_ms = rng.uniform(delay_ms - impairment.jitter_ms, delay_ms + impairment.jitter_ms)
    return max(0, round(delay_ms * 1_000_000))


@dataclass
class Counts:
    """What the impairer did: packets seen, dropped, released after a delay > 0, and the
    times the kernel could not hand a packet over (ENOBUFS: that packet passed unseen)."""

    packets: int = 0
    dropped: int = 0
    delayed: int = 0
    enobufs: int = 0

    def to_line(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_line(cls, line: str) -> Counts:
        """The counts of the impairer's last output line (KeyError/ValueError if not)."""
        raw = json.loads(line)
        return cls(**{k: int(raw[k]) for k in ("packets", "dropped", "delayed", "enobufs")})


@dataclass
class Scheduler:
    """Packets held until their release time; the socket-free half of the impairer."""

    impairment: Impairment
    seed: int | None = None
    counts: Counts = field(default_factory=Counts)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._held: list[tuple[int, int, int]] = []  # (release_ns, arrival order, packet id)
        self._order = 0

    def admit(self, packet_id: int, arrival_ns: int) -> int | None:
        """Decide packet ``packet_id``: None to drop it now, else its release time (ns, on
        the clock of ``arrival_ns``); a kept packet is held until ``due`` returns it."""
        self.counts.packets += 1
        delay_ns = draw(self.impairment, self._rng)
        if delay_ns is None:
            self.counts.dropped += 1
            return None
        if delay_ns > 0:
            self.counts.delayed += 1
        release_ns = arrival_ns + delay_ns
        heapq.heappush(self._held, (release_ns, self._order, packet_id))
        self._order += 1
        return release_ns

    def due(self, now_ns: int) -> list[int]:
        """The held packets whose release time is ``now_ns`` or earlier, earliest first
        (ties in arrival order); they are no longer held."""
        out = []
        held = self._held
        while held and held[0][0] <= now_ns:
            out.append(heapq.heappop(held)[2])
        return out

    def next_release_ns(self) -> int | None:
        return self._held[0][0] if self._held else None

    def release_all(self) -> list[int]:
        """Every held packet, in release order; nothing is held afterwards."""
        out = [entry[2] for entry in sorted(self._held)]
        self._held.clear()
        return out

    @property
    def held(self) -> int:
        return len(self._held)
