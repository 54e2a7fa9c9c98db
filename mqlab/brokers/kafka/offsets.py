"""Which offsets of a Kafka receiver's partitions were delivered and acked, what it may
commit, and the delivered mark it leaves in the commit metadata (module docstring of
``mqlab.brokers.kafka.driver``)."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Sequence

LOG = logging.getLogger(__name__)


GAP_RETRIES = 3  # seeks back over one gap in a partition's fetched offsets before accepting it
MARK = "delivered="  # commit metadata: the highest offset delivered on the partition


def mark_metadata(offset: int) -> str:
    return f"{MARK}{offset}"


def parse_mark(metadata: str | None) -> int:
    """The delivered mark in commit metadata; -1 if there is none."""
    if metadata and metadata.startswith(MARK):
        with contextlib.suppress(ValueError):
            return int(metadata[len(MARK) :])
    return -1


class OffsetTracker:
    """Per partition: offsets handed out in order, which are acked, what to commit, and the
    highest offset known to be delivered (the mark that flags redeliveries)."""

    def __init__(self) -> None:
        self.outstanding: dict[int, deque[int]] = {}
        self.acked: dict[int, set[int]] = {}
        self.next_commit: dict[int, int] = {}  # partition -> offset to commit (exclusive)
        self.expected: dict[int, int] = {}  # partition -> next offset to be handed out
        self.dirty: set[int] = set()
        self.marks: dict[int, int] = {}  # partition -> highest delivered offset; kept by forget()
        self.holes: dict[int, int] = {}  # partition -> an offset a bulk run left out (took_run)

    def inherit(self, partition: int, mark: int) -> None:
        """The mark an earlier owner committed (read at assignment)."""
        self.marks[partition] = max(self.marks.get(partition, -1), mark)

    def start(self, partition: int, offset: int) -> None:
        """The partition's committed offset at assignment: where consumption starts."""
        if offset >= 0:
            self.next_commit[partition] = offset
            self.expected[partition] = offset

    def delivered(self, partition: int, offset: int) -> bool:
        """Hand ``offset`` out; True if it was delivered before (at or below the mark)."""
        q = self.outstanding.get(partition)
        if q is not None and offset == self.expected.get(partition):  # the usual case
            q.append(offset)
            self.expected[partition] = offset + 1
            if offset <= self.marks.get(partition, -1):
                return True
            self.marks[partition] = offset
            self.dirty.add(partition)
            return False
        self.outstanding.setdefault(partition, deque()).append(offset)
        self.acked.setdefault(partition, set())
        # where this consumer started (unless known from the assignment): committing it
        # moves nothing, but carries the mark
        self.next_commit.setdefault(partition, offset)
        expected = self.expected.get(partition, offset)
        if offset > expected:
            LOG.warning(
                "kafka: partition %d: offset %d handed out, %d expected: commits stop before "
                "the gap (its messages come again, never skipped)",
                partition,
                offset,
                expected,
            )
        self.expected[partition] = max(expected, offset + 1)
        if offset <= self.marks.get(partition, -1):
            return True
        self.marks[partition] = offset
        self.dirty.add(partition)
        return False

    def ack(self, partition: int, offset: int) -> None:
        q = self.outstanding.get(partition)
        if q is None:
            return  # the partition was revoked meanwhile: the new owner gets it again
        if q and q[0] == offset == self.next_commit[partition]:  # acked in order: the usual
            q.popleft()
            self.next_commit[partition] = offset + 1
            self.dirty.add(partition)
            done = self.acked[partition]
            if not done:
                return
        else:
            done = self.acked[partition]
            done.add(offset)
        moved = False
        # only a contiguous run from the committed offset: an offset never handed out is
        # never committed over (a message dropped between fetch and delivery is not lost)
        while q and q[0] in done and q[0] == self.next_commit[partition]:
            done.discard(q[0])
            self.next_commit[partition] = q.popleft() + 1
            moved = True
        if moved:
            self.dirty.add(partition)

    def took_run(self, partition: int, end: int, last: int, hole: int = -1) -> None:
        """Every offset before ``end`` handed out and acked at once (a receiver in lanes:
        a fetched run recorded and acked together, from the partition's next expected
        offset on); ``last``: the highest offset delivered in it (-1: none); ``hole``: the
        first offset of the run the fetch did not bring (-1: none): commits stop there
        while this consumer owns the partition, so what follows comes again to the next
        owner or shows as undrained, never as committed unread."""
        if self.outstanding.get(partition):
            raise ValueError(
                f"kafka: partition {partition}: a run taken in bulk behind offsets handed "
                "out one by one"
            )
        if hole >= 0 and partition not in self.holes:
            self.holes[partition] = hole
            self.next_commit[partition] = hole
        if partition not in self.holes:
            self.next_commit[partition] = end
        self.expected[partition] = end
        if last > self.marks.get(partition, -1):
            self.marks[partition] = last
        self.dirty.add(partition)

    def to_commit(self) -> dict[int, tuple[int, int]]:
        """What to commit since the last call: partition -> (next offset to read, mark)."""
        out = {p: (self.next_commit[p], self.marks.get(p, -1)) for p in self.dirty}
        self.dirty.clear()
        return out

    def forget(self, partitions: Sequence[int]) -> None:
        for p in partitions:
            for table in (
                self.outstanding,
                self.acked,
                self.next_commit,
                self.expected,
                self.holes,
            ):
                table.pop(p, None)
            self.dirty.discard(p)
