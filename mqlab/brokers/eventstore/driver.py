"""EventStoreDB / KurrentDB (kurrentdbclient, gRPC): one stream, one persistent subscription.

- setup: a persistent subscription group ``<stream>-workers`` on the stream, from its start,
  with ``consumer_strategy`` (RoundRobin by default; DispatchToSingle also gives each event
  to one receiver) and no limit on receivers. The stream is made by its first append.
  Calling setup again keeps the group as it is.
- send: one append of the whole batch (kurrentdbclient's BatchAppend call, any expected
  version), returning when the leader acknowledged it. The server has no per-write setting:
  it acknowledges a write once a majority of the cluster has it (its fixed quorum rule);
  with a 3-node cluster that is 2 nodes. kurrentdbclient tries an append once more after a
  gRPC failure, and again on the new leader after "not leader", with the same event ids
  (the server usually drops a repeat by its ids; mqlab counts duplicates anyway).
- receive: each receiver reads the group over one gRPC stream whose buffer size is
  ``prefetch``: the server sends up to that many events this receiver has not acked. A
  reader thread takes them into a local buffer as they arrive; ``receive`` hands them out
  from it, an arriving one at once. An event held longer than half of
  ``message_timeout_s`` is not handed out (the server would soon send it again, maybe to
  another receiver) but nacked with ``retry`` (sent again at once, to any receiver);
  ``close`` does the same with every event held and never handed out.
- ack: ``ack`` returning means kurrentdbclient has the acks queued in order; its request
  stream sends them in batches of ``ack_batch_max`` or after ``ack_delay_s``. The protocol
  has no confirmation of acks. ``close`` returns once kurrentdbclient sent what was queued
  (it waits up to 5 s, then ends the stream). An ack lost with its connection means the
  event comes again (at least once). A delivery not handed out by this receiver, or acked
  already, is refused with ``DriverError`` (after acking the others).
- redelivery: the server sends an event again when it was not acked within
  ``message_timeout_s`` (the group's message timeout), or was nacked with ``retry``; each
  delivery carries the server's retry count, and a count above 0 flags it redelivered.
  After ``max_retry_count`` retries the server parks the event (the group's parked stream):
  it is not delivered again unless replayed, and counts as remaining.
- remaining: the stream's last event number minus the group's last checkpointed event
  number (``GetInfo``), plus its parked events; ``in_flight`` is the group's count of
  events sent to receivers and not acked. The checkpoint trails the acks by up to
  ``checkpoint_after_s`` (``min_checkpoint_count`` 1 lets it follow every ack), so while
  receivers work the count is an upper bound; once all is acked and checkpointed it is
  exact. ``identify`` reads the events after the checkpoint, and the parked ones, without
  consuming them.

kurrentdbclient is synchronous; each sender and receiver owns one client (one gRPC
channel, to the leader found by gossip from the endpoints). The lab's images run the
servers with ``Insecure`` (no TLS, no users), so the connection string says ``Tls=false``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kurrentdbclient import KurrentDBClient, StreamState
from kurrentdbclient.exceptions import (
    AlreadyExistsError,
    KurrentDBClientError,
    NotFoundError,
    ProgrammingError,
)
from kurrentdbclient.persistent import ConsumerStrategy

from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Delivery,
    Driver,
    Receiver,
    Remaining,
    Sender,
)
from mqlab.brokers.eventstore.events import (
    backlog,
    checkpoint_number,
    connection_uri,
    new_events,
    stream_name,
    to_delivery,
)
from mqlab.brokers.held import Held
from mqlab.errors import DriverError
from mqlab.typed import SettingsProblem, spec

LOG = logging.getLogger(__name__)


HOLD_FRACTION = 0.5  # an event held longer than this part of message_timeout_s is nacked
READER_JOIN_S = 10.0  # how long close() waits for the reader thread to end
ADMIN_TIMEOUT_S = 30.0  # setup, teardown and remaining() calls
INFO_TIMEOUT_S = 2.0  # the HTTP /info request of server_versions()


# the group's consumer strategies that give each event to one receiver (Pinned would tie
# events to one receiver by stream, which with one stream means one receiver for all)
STRATEGIES: dict[str, ConsumerStrategy] = {
    "RoundRobin": "RoundRobin",
    "DispatchToSingle": "DispatchToSingle",
}


@dataclass(frozen=True)
class EventStoreSettings:
    consumer_strategy: str = spec(
        "RoundRobin",
        choices=tuple(STRATEGIES),
        help="how the group spreads events over receivers; both give an event to one",
    )
    message_timeout_s: float = spec(
        30.0, min=1.0, max=3600.0, help="an event not acked this long is sent again"
    )
    max_retry_count: int = spec(
        10, min=0, help="retries of an event before the server parks it (parked: remaining)"
    )
    prefetch: int = spec(
        256,
        min=1,
        max=65_536,
        help="events the server sends ahead to each receiver, unacked (the subscription "
        "connection's buffer size); receive() hands them out from a local buffer",
    )
    live_buffer_size: int = spec(500, min=1, help="the group's buffer of new events")
    read_batch_size: int = spec(
        200, min=1, help="events the group reads at a time when catching up"
    )
    history_buffer_size: int = spec(
        500, min=2, help="events the group keeps when catching up (> read_batch_size)"
    )
    checkpoint_after_s: float = spec(
        2.0, min=0.1, max=3600.0, help="how often the group may write its checkpoint"
    )
    min_checkpoint_count: int = spec(
        1, min=1, help="acked events before a checkpoint may be written (1: follows every ack)"
    )
    max_checkpoint_count: int = spec(
        1000, min=1, help="acked events after which a checkpoint is written at once"
    )
    ack_batch_max: int = spec(50, min=1, help="acks sent to the server in one request")
    ack_delay_s: float = spec(
        0.2, min=0.0, max=10.0, help="longest an ack waits in kurrentdbclient before it is sent"
    )
    send_timeout_s: float = spec(
        10.0,
        min=0.1,
        help="an append not acknowledged by then fails; kurrentdbclient tries it once more, "
        "so a send fails after up to twice this",
    )

    def __post_init__(self) -> None:
        if self.read_batch_size >= self.history_buffer_size:
            raise SettingsProblem(
                "read_batch_size",
                f"{self.read_batch_size} is not below history_buffer_size "
                f"({self.history_buffer_size}): the server refuses such a group",
                "make read_batch_size smaller than history_buffer_size",
            )
        if self.min_checkpoint_count > self.max_checkpoint_count:
            raise SettingsProblem(
                "min_checkpoint_count",
                f"{self.min_checkpoint_count} is above max_checkpoint_count "
                f"({self.max_checkpoint_count})",
                "make min_checkpoint_count at most max_checkpoint_count",
            )


def _connect(driver: EventStoreDriver) -> KurrentDBClient:
    uri = connection_uri(driver.endpoints, driver.queue)
    try:
        return KurrentDBClient(uri)
    except (KurrentDBClientError, ValueError) as e:
        raise DriverError(f"eventstore: cannot connect to {uri}: {e}") from e


def _stop_quietly(sub: Any) -> None:
    with contextlib.suppress(Exception):  # it failed already; nothing more to lose
        sub.stop()


class EventStoreSender(Sender):
    def __init__(self, driver: EventStoreDriver):
        self.client = _connect(driver)
        self.stream = driver.stream
        self.timeout_s = driver.settings.send_timeout_s

    def send(self, batch: Sequence[bytes]) -> None:
        if not batch:
            return
        try:
            self.client.append_to_stream(
                self.stream,
                events=new_events(batch),
                current_version=StreamState.ANY,
                timeout=self.timeout_s,
            )
        except KurrentDBClientError as e:
            raise DriverError(
                f"eventstore: append of {len(batch)} events to {self.stream} failed: "
                f"{type(e).__name__}: {e}"
            ) from e

    def close(self) -> None:
        self.client.close()


class EventStoreReceiver(Receiver):
    """The group read over one gRPC stream; a reader thread fills the local buffer
    (module docstring). One condition guards the buffer, the failure and the stream."""

    def __init__(self, driver: EventStoreDriver):
        s: EventStoreSettings = driver.settings
        self.settings = s
        self.stream = driver.stream
        self.group = driver.group
        self.held = Held(s.message_timeout_s * HOLD_FRACTION)
        self.cond = threading.Condition()
        self.failure: str | None = None  # why the current subscription ended, if it did
        self.closing = False
        self.closed = False
        self.sub: Any = None  # kurrentdbclient's PersistentSubscription being read
        self.reader: threading.Thread | None = None
        self.client = _connect(driver)
        try:
            self._subscribe()
        except DriverError:
            self.client.close()
            raise

    def _subscribe(self) -> None:
        """Read the group over a new gRPC stream, with a reader thread of its own."""
        s = self.settings
        try:
            sub = self.client.read_subscription_to_stream(
                self.group,
                self.stream,
                event_buffer_size=s.prefetch,
                max_ack_batch_size=s.ack_batch_max,
                max_ack_delay=s.ack_delay_s,
            )
        except KurrentDBClientError as e:
            raise DriverError(
                f"eventstore: cannot read group {self.group} of {self.stream}: "
                f"{type(e).__name__}: {e}"
            ) from e
        reader = threading.Thread(
            target=self._read, args=(sub,), daemon=True, name=f"eventstore-{self.group}"
        )
        with self.cond:
            self.sub, self.reader = sub, reader
        reader.start()

    def _read(self, sub: Any) -> None:
        """Take the events of ``sub`` into the buffer until it ends; say why it ended."""
        why = "the server ended the subscription"
        try:
            for event in sub:
                d = to_delivery(event)
                with self.cond:
                    self.held.add([d], time.monotonic())
                    self.cond.notify_all()
        except Exception as e:  # noqa: BLE001 - any end is reported by the next receive()
            why = f"{type(e).__name__}: {e}"
        with self.cond:
            if not self.closing and sub is self.sub:
                self.failure = why
            self.cond.notify_all()

    def _nack(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            self.sub.nack(d.handle, "retry")

    def _drop_stale(self) -> None:
        stale = self.held.stale(time.monotonic())
        if stale:
            LOG.info("eventstore: %d events held too long, nacked (retry)", len(stale))
            with contextlib.suppress(ProgrammingError):  # the subscription stopped meanwhile
                self._nack(stale)

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                self._drop_stale()
                got = self.held.take(max_messages)
                if got:
                    return got
                if self.failure is not None:
                    failure, self.failure = self.failure, None
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self.cond.wait(left)
            # the subscription ended: what it held comes again from the server (the
            # connection is gone); read the group anew for the next receive()
            self.held.drop()
            old = self.sub
        # ended apart from the rest: kurrentdbclient waits up to 5 s for a stream that
        # failed to take its last requests
        threading.Thread(target=_stop_quietly, args=(old,), daemon=True).start()
        try:
            self._subscribe()
        except DriverError as e:
            with self.cond:
                self.failure = failure  # no live subscription: the next receive() tries again
            raise DriverError(f"eventstore: the subscription ended ({failure}); {e}") from e
        raise DriverError(f"eventstore: the subscription ended ({failure}); reading it again")

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        with self.cond:
            ok, refused = self.held.acked(deliveries)
            failure = self.failure
        if ok:
            if failure is not None:
                raise DriverError(
                    f"eventstore: the subscription ended ({failure}): {len(ok)} acks cannot "
                    "reach the server; their events come again"
                )
            try:
                for d in ok:
                    self.sub.ack(d.handle)
            except ProgrammingError as e:
                raise DriverError(f"eventstore: ack failed: {e}") from e
        if refused:
            raise DriverError(
                f"eventstore: {refused} of {len(deliveries)} deliveries were not handed out by "
                "this receiver or were acked already: not acked"
            )

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with self.cond:
            self.closing = True
            never_handed_out = self.held.drop()
        try:
            self._nack(never_handed_out)  # sent again at once, to another receiver
            self.sub.stop()  # sends what is queued, then ends the stream
        except Exception as e:  # noqa: BLE001 - closing anyway; unacked events come again
            LOG.warning("eventstore: receiver closed without sending its acks: %r", e)
        if self.reader is not None:
            self.reader.join(READER_JOIN_S)
        self.client.close()


class EventStoreDriver(Driver):
    name = "eventstore"
    Settings = EventStoreSettings
    client_libraries = ("kurrentdbclient",)
    identifies_remaining = True

    def __init__(self, settings: EventStoreSettings, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        self.stream = stream_name(queue)
        self.group = f"{self.stream}-workers"
        self.parked_stream = f"$persistentsubscription-{self.stream}::{self.group}-parked"

    @contextlib.contextmanager
    def _admin(self, what: str) -> Iterator[KurrentDBClient]:
        client = _connect(self)
        try:
            yield client
        except KurrentDBClientError as e:
            raise DriverError(f"eventstore: {what}: {type(e).__name__}: {e}") from e
        finally:
            client.close()

    def setup(self) -> None:
        s: EventStoreSettings = self.settings
        with self._admin(f"cannot create group {self.group} on {self.stream}") as client:
            try:
                client.create_subscription_to_stream(
                    self.group,
                    self.stream,
                    consumer_strategy=STRATEGIES[s.consumer_strategy],
                    message_timeout=s.message_timeout_s,
                    max_retry_count=s.max_retry_count,
                    min_checkpoint_count=s.min_checkpoint_count,
                    max_checkpoint_count=s.max_checkpoint_count,
                    checkpoint_after=s.checkpoint_after_s,
                    max_subscriber_count=0,  # no limit
                    live_buffer_size=s.live_buffer_size,
                    read_batch_size=s.read_batch_size,
                    history_buffer_size=s.history_buffer_size,
                    timeout=ADMIN_TIMEOUT_S,
                )
            except AlreadyExistsError:
                LOG.debug("eventstore: group %s exists already", self.group)

    def teardown(self) -> None:
        with self._admin(f"cannot remove {self.stream}") as client:
            with contextlib.suppress(NotFoundError):
                client.delete_subscription(
                    self.group, stream_name=self.stream, timeout=ADMIN_TIMEOUT_S
                )
            with contextlib.suppress(NotFoundError):
                client.delete_stream(
                    self.stream, current_version=StreamState.ANY, timeout=ADMIN_TIMEOUT_S
                )

    @property
    def redelivery_timeout_s(self) -> float:
        return float(self.settings.message_timeout_s)

    def remaining(self, identify: bool = False) -> Remaining:
        """Events after the group's checkpoint plus its parked ones (module docstring)."""
        with self._admin(f"cannot read the state of group {self.group}") as client:
            info = client.get_subscription_info(self.group, self.stream, timeout=ADMIN_TIMEOUT_S)
            last = client.get_current_version(self.stream, timeout=ADMIN_TIMEOUT_S)
            last_event = None if last is StreamState.NO_STREAM else int(last)
            checkpoint = checkpoint_number(info.last_checkpointed_event_position)
            count = backlog(last_event, checkpoint) + int(info.parked_message_count)
            payloads = None
            if identify:
                payloads = self._stored(client, checkpoint + 1, last_event)
        return Remaining(count, payloads, int(info.total_in_flight_messages))

    def _stored(self, client: KurrentDBClient, first: int, last: int | None) -> list[bytes]:
        """Headers of the events ``first``..``last`` of the stream, then of the parked ones
        (their links resolved), at most ``identify_cap`` in all."""
        cap = self.identify_cap
        out: list[bytes] = []
        if last is not None and first <= last:
            for e in client.read_stream(
                self.stream, stream_position=first, limit=cap, timeout=ADMIN_TIMEOUT_S
            ):
                out.append(bytes(e.data)[:IDENTIFY_PREFIX_BYTES])
        if len(out) < cap:
            with contextlib.suppress(NotFoundError):
                for e in client.read_stream(
                    self.parked_stream,
                    resolve_links=True,
                    limit=cap - len(out),
                    timeout=ADMIN_TIMEOUT_S,
                ):
                    out.append(bytes(e.data)[:IDENTIFY_PREFIX_BYTES])
        return out

    def sender(self) -> Sender:
        return EventStoreSender(self)

    def receiver(self) -> Receiver:
        return EventStoreReceiver(self)

    def server_versions(self) -> list[str]:
        """Each node's version from its HTTP ``/info`` (``esVersion``), where it answers."""
        versions = []
        for node in self.endpoints.nodes:
            url = f"http://{node.host}:{node.port}/info"
            try:
                with urllib.request.urlopen(url, timeout=INFO_TIMEOUT_S) as resp:
                    info = json.load(resp)
            except (OSError, ValueError):  # a node may be down; report what answers
                LOG.debug("eventstore: no version from %s", url)
                continue
            versions.append(f"EventStoreDB {info.get('esVersion', '?')} ({node.host})")
        return versions


DRIVER = EventStoreDriver

Settings = EventStoreSettings  # the profile [settings] schema, by its conventional name
