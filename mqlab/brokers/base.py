"""The driver interface: what every broker adapter implements (mqperf's contract).

- ``Sender.send(batch)`` returns only once the broker confirmed every message of
  the batch as the profile demands (durable and replicated as configured).
  Workers call ``Sender.send_stamped``, which is ``send`` of the batch the envelope
  makes, or, closed loop, ``Sender.send_run`` (batches back to back, each through
  ``send_stamped``); a driver may override them to write those messages straight
  into its wire bytes, and a run of them in one compiled call (Redis does).
- ``Receiver.receive(max_messages, timeout_s)`` returns deliveries that other
  receivers cannot get until they are acked or their visibility timeout passes.
- ``Receiver.ack(deliveries)`` removes them. Delivery is at least once.
- ``Receiver.receive`` never sits on messages: a message already in the queue is
  returned at once, and one that arrives during the call is returned when it
  arrives, not when the batch is full or the timeout ends.
- ``Driver.remaining()`` says what the broker still holds for the queue after the
  receivers stopped (ready plus delivered-but-unacked), and which messages, where
  the broker can be read without consuming.

A driver object is shared by the process; ``sender()`` and ``receiver()`` make
one client (connection) per worker thread. Client libraries stay inside the
driver module.
"""

from __future__ import annotations

import array
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.errors import DriverError

IDENTIFY_CAP = 1_000_000  # remaining(identify=True) returns at most this many payloads
IDENTIFY_PREFIX_BYTES = 24  # ...each cut to its first bytes: the mqlab message header


@dataclass(frozen=True)
class NodeEndpoint:
    index: int
    host: str
    port: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Endpoints:
    """How clients reach a cluster (written to and read from JSON)."""

    broker: str
    nodes: tuple[NodeEndpoint, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "nodes": [
                {"index": n.index, "host": n.host, "port": n.port, "extra": n.extra}
                for n in self.nodes
            ],
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoints:
        return cls(
            broker=data["broker"],
            nodes=tuple(
                NodeEndpoint(n["index"], n["host"], n["port"], n.get("extra", {}))
                for n in data["nodes"]
            ),
            extra=data.get("extra", {}),
        )


class Delivery(NamedTuple):
    """One message handed out (a tuple: made once per message, about 40% cheaper than a
    frozen dataclass, measured 2026-11-28)."""

    payload: bytes
    handle: Any  # the driver's own token for ack (message id, row id, delivery tag...)
    redelivered: bool = False


@dataclass(frozen=True)
class Remaining:
    """What the broker still holds for the queue: ready and in-flight (unacked) messages.

    ``count`` is what the broker reports. ``payloads`` holds the messages themselves
    (at least their 24-byte mqlab headers) when the driver could read them without
    consuming them (``identify=True`` and ``Driver.identifies_remaining``); ``None``
    when only the count is known. ``in_flight`` is the part of ``count`` delivered to
    a consumer and not acked yet, when the broker says (``None``: not reported).

    Drivers return at most ``Driver.identify_cap`` payloads (``IDENTIFY_CAP``), each
    cut to its first ``IDENTIFY_PREFIX_BYTES`` bytes, so that a large backlog cannot
    exhaust memory; ``count`` stays the broker's full count, so ``len(payloads) <
    count`` says the list was capped.
    """

    count: int
    payloads: list[bytes] | None = None
    in_flight: int | None = None


class Lane(NamedTuple):
    """One closed-loop sender's run in :meth:`Sender.send_lanes`: its client, sender id,
    first seq, batch sizes and the buffer for its batches' start and end times."""

    client: Sender
    sender: int
    first_seq: int
    sizes: array.array[int]
    records: array.array[int]


LaneOutcome = tuple[int, Exception | None]  # batches confirmed; the failure that ended it


def lanes_engine() -> Any:
    """``mqlab._sendpath.Lanes`` where the install built it, else None."""
    return compiled.module.Lanes if compiled.module is not None else None


class Sender(ABC):
    @abstractmethod
    def send(self, batch: Sequence[bytes]) -> None:
        """Send ``batch``; return when the broker confirmed all of it; raise otherwise."""

    def send_stamped(
        self, sender: int, first_seq: int, n: int, sent_ns: int, pool: envelope.PayloadPool
    ) -> None:
        """:meth:`send` of ``envelope.encode_batch(sender, first_seq, n, sent_ns, pool)``:
        the workers' hot path. A driver may write those messages straight into its wire
        bytes instead (:class:`mqlab.envelope.Framed`); what the broker gets
        must be the same messages."""
        self.send(envelope.encode_batch(sender, first_seq, n, sent_ns, pool))

    def send_run(
        self,
        sender: int,
        first_seq: int,
        sizes: array.array[int],
        until_ns: int,
        wall_offset_ns: int,
        pool: envelope.PayloadPool,
        records: array.array[int],
    ) -> tuple[int, Exception | None]:
        """A closed-loop sender's batches back to back: ``sizes[i]`` messages each, from
        ``first_seq`` on, none started at or after ``until_ns`` (``time.monotonic_ns()``).
        Each is :meth:`send_stamped` stamped with its start (``start + wall_offset_ns``:
        wall-clock ns); its start and end (monotonic ns) go to ``records[2i]`` and
        ``records[2i + 1]``. Returns (the batches confirmed, the failure of the batch after
        them, which ended the run, or None). A driver may run them in one compiled call
        (Redis does)."""
        done = 0
        for i, n in enumerate(sizes):
            start = time.monotonic_ns()
            if start >= until_ns:
                break
            records[2 * i] = start
            try:
                self.send_stamped(sender, first_seq, n, start + wall_offset_ns, pool)
            except Exception as exc:  # noqa: BLE001 - the caller counts and retries it
                records[2 * i + 1] = time.monotonic_ns()
                return done, exc
            records[2 * i + 1] = time.monotonic_ns()
            done += 1
            first_seq += n
        return done, None

    # -- closed-loop senders in lanes (mqlab._sendpath.Lanes), where lane_proto is set --
    lane_proto: ClassVar[int | None] = None  # mqlab._sendpath.REDIS, .PG, .NATS or .PULSAR

    def lane_timeout_ns(self) -> int:
        """A batch in flight with no bytes moved for this long fails (a timeout)."""
        raise NotImplementedError(f"{type(self).__name__} does not send in lanes")

    def lane_connected(self) -> bool:
        """Whether :meth:`lane_args` can be had now, without connecting first."""
        return True

    def lane_connect(self) -> None:  # noqa: B027 - optional hook
        """(Re)connect, blocking (the workers call it off the lanes' thread, and time it
        as part of the batch that waits for it); DriverError if it fails."""

    def lane_args(
        self, sender: int, pool: envelope.PayloadPool
    ) -> tuple[int, tuple[Any, ...], int, int]:
        """(socket, run spec, first stream key, connection generation) of a lane of this
        connected sender (see mqlab/_sendpath.c); DriverError if it cannot send in lanes."""
        raise NotImplementedError(f"{type(self).__name__} does not send in lanes")

    def lane_outcome(self, status: int, integer: int, message: str | None) -> Exception | None:
        """The failure a lane's (status, integer, message) says (None: none); a failure
        that leaves the connection out of step drops it (the next batch connects)."""
        raise NotImplementedError(f"{type(self).__name__} does not send in lanes")

    def lane_ran(self, done: int, failed: int) -> None:  # noqa: B027 - optional hook
        """A lane's run ended after ``done`` batches confirmed and ``failed`` failed (the
        failed one, and those a fixed-rate lane had in flight behind it, whose replies
        were not read: more than one, and the connection is out of step)."""

    @classmethod
    def send_lanes(
        cls,
        lanes: Sequence[Lane],
        until_ns: int,
        wall_offset_ns: int,
        pool: envelope.PayloadPool,
    ) -> list[LaneOutcome]:
        """:meth:`send_run` of several senders of this class (each its own connection) at
        once, from one thread, in one ``mqlab._sendpath.Lanes`` set: each lane's next
        batch starts when its own last one is confirmed, none at or after ``until_ns``;
        returns once no batch is in flight. A sender that is not connected connects first
        (a failure fails its first batch). The workers drive lanes for a whole run with
        ``mqlab.workload.lanes``; this is one bounded run of them."""
        engine = lanes_engine()
        if cls.lane_proto is None or engine is None or not lanes:
            raise NotImplementedError(f"{cls.__name__} does not send in lanes")
        out: list[LaneOutcome] = [(0, None)] * len(lanes)
        ls = engine(cls.lane_proto, len(lanes), lanes[0].client.lane_timeout_ns())
        going = []
        for j, lane in enumerate(lanes):
            started = time.monotonic_ns()
            try:
                if not lane.client.lane_connected():
                    lane.client.lane_connect()
                fd, spec, key, gen = lane.client.lane_args(lane.sender, pool)
            except DriverError as e:
                lane.records[0], lane.records[1] = started, time.monotonic_ns()
                lane.client.lane_ran(0, 1)
                out[j] = (0, e)
                continue
            ls.assign(j, fd, spec, lane.sizes, lane.first_seq, key, lane.records, started, gen)
            going.append(j)
        while going:
            results = ls.run(2**62, until_ns, wall_offset_ns, -1)
            still = []
            for j in going:
                done, in_flight, status = results[j]
                if status is not None:
                    failure = lanes[j].client.lane_outcome(*status)
                    lanes[j].client.lane_ran(done, 1 if failure is not None else 0)
                    out[j] = (done, failure)
                elif in_flight or (done < len(lanes[j].sizes) and time.monotonic_ns() < until_ns):
                    still.append(j)
                else:
                    lanes[j].client.lane_ran(done, 0)
                    out[j] = (done, None)
            going = still
        for j in range(len(lanes)):
            ls.release(j)
        return out

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""


class LaneReceipt(NamedTuple):
    """What one receiver got in :meth:`Driver.receive_lanes`: the first
    ``envelope.HEADER_BYTES`` of each message long enough (in order), each batch's wall
    clock receive time (ns) and length (messages kept) as native i64 arrays, the indices
    (among the headers) of those flagged redelivered, as i64; the messages received, those
    shorter than a header, those acked; the failure that ended it, if any (its
    connection is dropped: its last batch comes again after its lease)."""

    headers: bytes
    recv_ns: bytes
    lens: bytes
    flagged: bytes
    received: int
    short: int
    acked: int
    error: Exception | None


class ReceiptTally:
    """What a receiver in Python-driven lanes got in one call (RocketMQ's and Kafka's
    ``lanes.py``), gathered as it comes: :meth:`receipt` is its :class:`LaneReceipt`."""

    def __init__(self) -> None:
        self.headers = bytearray()
        self.recv_ns = array.array("q")
        self.lens = array.array("q")
        self.flagged = array.array("q")
        self.received = self.short = self.acked = 0
        self.error: Exception | None = None

    def receipt(self) -> LaneReceipt:
        return LaneReceipt(
            bytes(self.headers),
            self.recv_ns.tobytes(),
            self.lens.tobytes(),
            self.flagged.tobytes(),
            self.received,
            self.short,
            self.acked,
            self.error,
        )


def merged(parts: Sequence[LaneReceipt]) -> LaneReceipt:
    """One receiver's receipt from its connections' (in their order): headers, batch
    times and lengths one after the other, each flagged index moved past the headers
    before it, the counts summed, the first failure. Parts with nothing in them (most
    calls' Python-path part, in Redis's lanes) are left out: no bytes copied for them."""
    kept = [p for p in parts if p.received or p.acked or p.error is not None]
    parts = kept or parts[:1]
    if len(parts) == 1:
        return parts[0]
    flagged = array.array("q")
    base = 0
    for p in parts:
        flagged.extend(base + i for i in array.array("q", p.flagged))
        base += len(p.headers) // envelope.HEADER_BYTES
    errors = [p.error for p in parts if p.error is not None]
    return LaneReceipt(
        b"".join(p.headers for p in parts),
        b"".join(p.recv_ns for p in parts),
        b"".join(p.lens for p in parts),
        flagged.tobytes(),
        sum(p.received for p in parts),
        sum(p.short for p in parts),
        sum(p.acked for p in parts),
        errors[0] if errors else None,
    )


def receipt_of(
    deliveries: Sequence[Delivery], recv_wall_ns: int, acked: int, error: Exception | None
) -> LaneReceipt:
    """A receipt of deliveries a receiver in lanes took through its Python path (one
    batch, received at ``recv_wall_ns``): their headers, the redelivered ones flagged."""
    headers: list[bytes] = []
    flagged, short = array.array("q"), 0
    for d in deliveries:
        if len(d.payload) < envelope.HEADER_BYTES:
            short += 1
            continue
        if d.redelivered:
            flagged.append(len(headers))
        headers.append(d.payload[: envelope.HEADER_BYTES])
    kept = len(headers)
    return LaneReceipt(
        b"".join(headers),
        array.array("q", [recv_wall_ns] if kept else []).tobytes(),
        array.array("q", [kept] if kept else []).tobytes(),
        flagged.tobytes(),
        len(deliveries),
        short,
        acked,
        error,
    )


class Receiver(ABC):
    @abstractmethod
    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        """Up to ``max_messages`` deliveries, waiting at most ``timeout_s`` for the first."""

    @abstractmethod
    def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge (remove) ``deliveries``, in order. Returning means at least that the
        acks were handed to the client library, which writes them in order; each driver's
        docstring says what more it guarantees (the broker's confirmation, awaited here or
        by ``close``). An ack of a delivery not handed out, or acked already, is refused
        with DriverError where the driver tracks what it handed out."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Flush pending acks and release the connection; unacked deliveries (and those
        read ahead, never handed out) become visible again later."""


class Driver(ABC):
    """One broker adapter. Subclasses set the class attributes and ``Settings``."""

    name: ClassVar[str]
    Settings: ClassVar[type]  # frozen dataclass of the profile's [settings]
    supports_batch_send: ClassVar[bool] = True  # send(batch) is one broker call
    supports_batch_receive: ClassVar[bool] = True  # receive(max) returns many at once
    client_libraries: ClassVar[tuple[str, ...]] = ()  # distributions named in the manifest
    identifies_remaining: ClassVar[bool] = False  # remaining(identify=True) returns payloads
    identify_cap: int = IDENTIFY_CAP  # most payloads remaining(identify=True) returns
    # remaining() cannot see what a receive took from the broker and no receiver got (a
    # request a fault cut off): hidden and uncounted until redelivery_timeout_s has passed
    # (mqlab.run.drain trusts "empty" only that long after the last fault)
    hides_cut_off_receives: ClassVar[bool] = False

    def __init__(self, settings: Any, endpoints: Endpoints, queue: str):
        self.settings = settings
        self.endpoints = endpoints
        self.queue = queue

    @abstractmethod
    def setup(self) -> None:
        """Create the queue/stream/table; calling it again changes nothing."""

    @abstractmethod
    def teardown(self) -> None:
        """Remove what setup created (no error if already gone)."""

    @abstractmethod
    def sender(self) -> Sender: ...

    @abstractmethod
    def receiver(self) -> Receiver: ...

    def send_path(self) -> str:
        """How its senders' batches are written and sent: "python", or "compiled" where
        the driver has a compiled send path and it is built."""
        return "python"

    def receives_in_lanes(self) -> bool:
        """Whether a worker's receivers of this driver are driven from one thread, all
        together, through :meth:`receive_lanes` (else: a thread each)."""
        return False

    def receive_path(self) -> str:
        """How a worker's receivers run: "python" (a thread each), "lanes" (all from one
        thread, :meth:`receive_lanes` in Python) or "compiled-lanes" (from one thread, in
        C)."""
        return "lanes" if self.receives_in_lanes() else "python"

    def receive_lanes(
        self,
        receivers: Sequence[Receiver],
        max_messages: int,
        until_ns: int,
        wall_offset_ns: int,
        wake_fd: int,
    ) -> list[LaneReceipt]:
        """Receive and ack on every one of ``receivers`` (of drivers of this class and
        settings, each on its own queue) until ``until_ns``
        (monotonic) or ``wake_fd`` is readable, every batch acked by the time it returns
        unless its receiver failed: for each, what it got (:class:`LaneReceipt`)."""
        raise NotImplementedError(f"{type(self).__name__} does not receive in lanes")

    def sends_in_lanes(self) -> bool:
        """Whether senders of this driver (closed loop or fixed rate) are driven from one
        thread each worker, in ``mqlab._sendpath.Lanes`` (else: a thread each)."""
        return False

    @abstractmethod
    def remaining(self, identify: bool = False) -> Remaining:
        """What the broker still holds for this queue (see :class:`Remaining`); with
        ``identify`` also the messages, read without consuming them, if the broker allows."""

    @property
    @abstractmethod
    def redelivery_timeout_s(self) -> float:
        """How long an unacked delivery of a live receiver stays hidden before it is
        delivered again (visibility timeout, ack wait, session timeout); 0 if only a
        closed connection returns it."""

    @abstractmethod
    def server_versions(self) -> list[str]:
        """Broker server versions as the servers report them, one per node reached."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release admin connections."""
