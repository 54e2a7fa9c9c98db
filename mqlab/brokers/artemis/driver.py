"""ActiveMQ Artemis over STOMP 1.2 (mqlab's own client: ``frames`` and ``conn`` here).

Why STOMP and not AMQP 1.0 (python-qpid-proton, not in uv.lock) or Core (no Python client):
STOMP has what a durable queue needs, a receipt on each persistent SEND, client-individual
acks with receipts, and failover by trying each node in turn. It runs here against real
Artemis 2.40.0 (``mqlab.brokers.artemis.cluster``). The ActiveMQ 5 branches below (the
former local stand-in) remain for a broker whose CONNECTED frame names ActiveMQ 5. The
client is mqlab's own (it was stomp.py, whose per-frame parsing and per-message listener
calls cost the receiver about 3x the CPU per message of ``artemis perf consumer``): a
connection's reader thread splits each read into frames in bulk and hands a read's
MESSAGE frames to the receiver at once; a batch's ACK frames go in one write.

- server: the CONNECTED frame's ``server`` header says which broker answered
  (``ActiveMQ-Artemis/...`` or ``ActiveMQ/5...``); the destination and the prefetch
  header follow from it.
- queue: on Artemis, an anycast address with a queue of the same name, ``<queue>``
  (SEND ``destination-type: ANYCAST``, SUBSCRIBE ``subscription-type: ANYCAST``). The
  broker auto-creates both, durable; mqlab's broker.xml (``mqlab.brokers.artemis.node``)
  keeps them when they are empty. On ActiveMQ 5, the queue destination
  ``/queue/<queue>``, stored in KahaDB. ``setup`` creates the queue before anything is
  sent: a SUBSCRIBE whose selector matches nothing, then its UNSUBSCRIBE.
- send: every message of the batch is a SEND of its own, with ``persistent: true`` and
  its own ``receipt`` header. The send then waits for all the RECEIPTs together
  (``receipt_timeout_s``). A broker answers a persistent SEND's receipt once it has
  stored the message. ActiveMQ 5 (the stand-in) does so after its KahaDB journal write,
  fsynced. Artemis does so once its journal and the replicating backup have it
  (synchronous replication). An ERROR frame, a lost connection or the timeout fails the
  send; its messages may still have been stored (at least once).
- receive: one subscription per receiver, ``ack: client-individual``. The broker pushes
  messages ahead of ``receive()`` into the receiver's buffer (``mqlab.brokers.held``),
  up to ``prefetch`` of them. ActiveMQ 5 counts that in messages
  (``activemq.prefetchSize``). Artemis counts its ``consumer-window-size`` in bytes, so
  it gets ``prefetch * window_bytes_per_message``. A message the broker dispatched to a
  subscription goes to no other subscription until it is acked, or until it returns to
  the queue when its connection goes. The first message of a ``receive`` waits up to the
  timeout; the rest of the batch takes only what is already buffered.
- ack: one ACK frame per delivery (its ``ack`` header), the call's frames written
  together. With ``ack_receipts`` (the default), the last ACK of the call carries a
  receipt: a broker handles one connection's frames in order, so that receipt says it
  has handled every ACK of the call. ``ack_receipt_wait`` says which call waits for it:
  ``call``, the ``ack()`` that wrote it; ``next`` (the default), the receiver's next
  ``ack()``, once that call's own ACKs are written, so that the broker journals (and
  replicates) one batch's acks while the receiver takes the next batch from its buffer,
  as a Core consumer's asynchronous acks (``artemis perf consumer``) go. An ERROR for
  those acks, or their connection lost before the receipt, fails that next call (the
  messages of a lost connection come again); ``close()``'s DISCONNECT comes after the
  last ACKs on the same connection, so the broker handles them before it lets the
  connection go. An ack of a delivery this receiver did not hand out, or has acked
  already, or got on a connection since lost, is refused with DriverError. (The message
  of a lost connection comes again.) Not STOMP's ``client`` mode: Artemis 2.40.0 takes
  its ACK as cumulative (``ServerSession.acknowledge`` on every delivery of the
  subscription up to it, where ``client-individual`` calls ``individualAcknowledge``),
  which would be one ACK per batch, but an ack that leaves a gap (a delivery handed out
  earlier and not acked, as the contract suite does) cannot be said in it.
- at least once: neither broker has a visibility timeout (``redelivery_timeout_s`` is
  0). A message dispatched to a subscription and not acked, whether handed out or only
  prefetched, returns to the queue when the subscriber's connection goes. That happens
  on the DISCONNECT of ``close()``, on a client process's exit (TCP close), or when the
  broker misses the client's heart-beats (``heartbeat_s``). ActiveMQ 5 then raises the
  message's redelivery counter and dispatches it to another consumer, with a
  ``redelivered: true`` header. Artemis cancels the delivery back to its queue, counts
  it (delivery count), and its STOMP frames carry ``redelivered: true`` once the count
  is above 1. The driver never NACKs: on ActiveMQ 5 a NACK is a poison ack that moves
  the message to the dead-letter queue, and on Artemis a NACK counts toward
  ``max-delivery-attempts`` (mqlab's broker.xml sets that to -1, no limit).
- failover: a connection tries every node of the endpoints in order (the failover list).
  Only the serving broker accepts connections: ActiveMQ 5's waiting slaves open no
  connector, and an Artemis backup serves no clients until it becomes live. A lost
  connection fails the call under way. The next call connects again: a sender right
  away; a receiver subscribes again and drops what it had buffered, since the broker
  returns those messages to the queue.
- remaining: ActiveMQ 5 answers through its statistics plugin (``statisticsBrokerPlugin``
  in the stand-in's activemq.xml). A message sent to
  ``ActiveMQ.Statistics.Destination.<queue>`` gets a map reply on a temporary queue: the
  queue's ``size`` (messages stored and not acked, in flight included) and its
  ``inflightCount``. The map arrives as XML: STOMP's ``jms-map-xml`` transformation, for
  which the broker needs XStream, Debian's ``libxstream-java``. Artemis answers through
  its management address (``activemq.management``): the queue's ``messageCount`` and
  ``deliveringCount`` attributes, replied to a queue of the driver's own. Neither broker
  reads messages out without dispatching them, so ``identify`` gives no payloads.
- teardown: on Artemis, the management operation ``destroyQueue``. ActiveMQ 5 cannot
  remove a queue over STOMP: the (drained) queue stays in the stand-in's store.

What is verified where: everything above for Artemis runs against Artemis 2.40.0 here (the
contract suite, the byte window, failover to the backup, ``artemis-short``). Measured here,
2.40.0 delivers again what a closed subscription held with delivery count 1, so without
``redelivered: true`` (the contract target says ``reports_redelivery=False``).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from mqlab.brokers.artemis.frames import Frame
from mqlab.brokers.artemis.wire import (
    NO_MATCH_SELECTOR,
    STATS_END,
    STATS_PREFIX,
    Link,
    Settings,
    connect,
    destination,
    management_frame,
    management_result,
    parse_stats_map,
    send_headers,
    stats_end,
    subscribe_headers,
)
from mqlab.brokers.base import Delivery, Driver, Receiver, Remaining, Sender
from mqlab.brokers.held import Held
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)


class StompSender(Sender):
    def __init__(self, driver: ArtemisDriver):
        self.driver = driver
        self.link = driver.connect()

    def send(self, batch: Sequence[bytes]) -> None:
        if self.link.lost:  # the node went: connect to whichever serves now
            self.link.close()
            self.link = self.driver.connect()
        link = self.link
        dest = destination(self.driver.queue, link.artemis)
        base = send_headers(link.artemis)
        ids = []
        for m in batch:
            rid = link.receipt_id()
            ids.append(rid)
            link.frame(
                functools.partial(link.conn.send, dest, m, headers={**base, "receipt": rid}),
                "send",
            )
        link.wait(ids, self.driver.settings.receipt_timeout_s, "send")

    def close(self) -> None:
        self.link.close()


class StompReceiver(Receiver):
    """A client-individual subscription whose broker pushes up to ``prefetch`` messages
    into ``held``, handed out by ``receive`` (module docstring)."""

    def __init__(self, driver: ArtemisDriver):
        self.driver = driver
        self.cond = threading.Condition()
        self.held = Held(math.inf)  # no visibility timeout: a held message never goes stale
        self.generation = 0  # which connection deliveries came on (part of their handle)
        self.sub_id = f"mqlab-{uuid.uuid4().hex[:10]}"
        self.closed = False
        self.unconfirmed: tuple[Link, str] | None = None  # the last ack's link and receipt
        self.link = self._subscribe()

    def _arrived(self, generation: int, frames: list[Frame]) -> None:
        """The connection's reader thread: the MESSAGE frames of one read."""
        deliveries = []
        for f in frames:
            h = f.headers
            ack_id = h.get("ack") or h.get("message-id")
            redelivered = h.get("redelivered", "false").lower() == "true"
            deliveries.append(Delivery(f.body, (generation, str(ack_id)), redelivered))
        with self.cond:
            if generation == self.generation:
                waiting = not len(self.held)  # receive() waits only on an empty buffer
                self.held.add(deliveries, time.monotonic())
                if waiting:
                    self.cond.notify_all()

    def _subscribe(self) -> Link:
        with self.cond:
            self.generation += 1
            generation = self.generation
            dropped = self.held.drop()  # the broker returns them to the queue
        if dropped:
            LOG.info("artemis: connection lost: %d buffered messages dropped", len(dropped))
        link = self.driver.connect(self.cond, lambda f: self._arrived(generation, f), lean=True)
        rid = link.receipt_id()
        headers = {**subscribe_headers(self.driver.settings, link.artemis), "receipt": rid}
        dest = destination(self.driver.queue, link.artemis)
        try:
            link.frame(
                lambda: link.conn.subscribe(
                    dest, id=self.sub_id, ack="client-individual", headers=headers
                ),
                "subscribe",
            )
            link.wait([rid], self.driver.settings.receipt_timeout_s, "subscribe")
        except DriverError:
            link.close()
            raise
        return link

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        if self.link.lost:
            self.link.close()
            self.link = self._subscribe()
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while not len(self.held) and not self.link.lost:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self.cond.wait(left)
            return self.held.take(max_messages)

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        with self.cond:
            ok, refused = self.held.acked(deliveries)
            link, generation = self.link, self.generation
        # a lost connection's deliveries cannot be acked (the next receive connects anew)
        current = [d for d in ok if d.handle[0] == generation and not link.lost]
        stale = len(ok) - len(current)
        s = self.driver.settings
        previous, self.unconfirmed = self.unconfirmed, None
        if current:
            last_rid = link.receipt_id() if s.ack_receipts else None
            ids = [d.handle[1] for d in current]
            link.frame(functools.partial(link.conn.ack_many, ids, last_rid), "ack")
            if last_rid is not None and s.ack_receipt_wait == "call":
                link.wait([last_rid], s.receipt_timeout_s, "ack")
            elif last_rid is not None:
                self.unconfirmed = (link, last_rid)
        if previous is not None:  # the last call's acks (ack_receipt_wait "next")
            previous[0].wait([previous[1]], s.receipt_timeout_s, "the previous ack")
        if refused or stale:
            raise DriverError(
                f"artemis: {refused} of {len(deliveries)} deliveries were not handed out by "
                f"this receiver or were acked already, {stale} came on a connection since "
                "lost (they come again): not acked"
            )

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.link.close()  # the ACKs written before it are handled first


# -- the driver ------------------------------------------------------------------------
class ArtemisDriver(Driver):
    name = "artemis"
    Settings = Settings
    client_libraries = ()  # mqlab's own STOMP client (frames.py, conn.py)
    identifies_remaining = False

    def __init__(self, settings: Any, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        self.hosts = [(n.host, n.port) for n in endpoints.nodes]

    def connect(
        self,
        cond: threading.Condition | None = None,
        on_message: Callable[[list[Frame]], None] | None = None,
        text_bodies: bool = False,
        lean: bool = False,
    ) -> Link:
        return connect(
            self.hosts, self.settings, cond, on_message, text_bodies=text_bodies, lean=lean
        )

    def _request(
        self,
        build: Callable[[str], list[tuple[str, bytes, dict[str, str]]]],
        what: str,
        *,
        is_end: Callable[[bytes], bool] | None = None,
        text_bodies: bool = False,
    ) -> list[list[tuple[dict[str, str], bytes]]]:
        """Subscribe a reply destination of its own, then SEND the frames ``build(reply_to)``
        gives one at a time, each once the reply to the one before came: one reply each,
        or replies up to the one whose body ``is_end`` (left out). The replies, per frame."""
        s: Settings = self.settings
        cond = threading.Condition()
        got: list[tuple[dict[str, str], bytes]] = []

        def arrived(frames: list[Frame]) -> None:
            with cond:
                got.extend((dict(f.headers), f.body) for f in frames)
                cond.notify_all()

        def answered(start: int) -> bool:
            if is_end is not None:
                return any(is_end(body) for _, body in got[start:])
            return len(got) > start

        link = self.connect(cond, arrived, text_bodies=text_bodies)
        try:
            if link.artemis:
                reply_to = f"mqlab.reply.{uuid.uuid4().hex[:12]}"
                sub = {"subscription-type": "ANYCAST"}
            else:
                reply_to = f"/temp-queue/mqlab-reply-{uuid.uuid4().hex[:12]}"
                sub = {}
            rid = link.receipt_id()
            link.frame(
                lambda: link.conn.subscribe(
                    reply_to, id="reply", ack="auto", headers={**sub, "receipt": rid}
                ),
                what,
            )
            link.wait([rid], s.receipt_timeout_s, what)
            out = []
            for dest, body, headers in build(reply_to):
                with cond:
                    start = len(got)
                link.frame(functools.partial(link.conn.send, dest, body, headers=headers), what)
                deadline = time.monotonic() + s.receipt_timeout_s
                with cond:
                    while not answered(start):
                        left = deadline - time.monotonic()
                        if link.lost or left <= 0:
                            raise DriverError(
                                f"artemis: {what}: no reply within {s.receipt_timeout_s} s"
                                + (" (connection lost)" if link.lost else "")
                            )
                        cond.wait(left)
                    out.append([(h, b) for h, b in got[start:] if is_end is None or not is_end(b)])
            return out
        finally:
            link.close()

    def setup(self) -> None:
        """The queue, made before anything is sent: a SUBSCRIBE (selector matching nothing)
        and its UNSUBSCRIBE. Calling it again changes nothing."""
        s: Settings = self.settings
        link = self.connect()
        try:
            rid = link.receipt_id()
            headers = {"selector": NO_MATCH_SELECTOR, "receipt": rid}
            if link.artemis:
                headers["subscription-type"] = "ANYCAST"
            dest = destination(self.queue, link.artemis)
            link.frame(
                lambda: link.conn.subscribe(
                    dest, id="setup", ack="client-individual", headers=headers
                ),
                "setup",
            )
            link.wait([rid], s.receipt_timeout_s, f"setup of {dest}")
            rid = link.receipt_id()
            link.frame(lambda: link.conn.unsubscribe("setup", headers={"receipt": rid}), "setup")
            link.wait([rid], s.receipt_timeout_s, f"setup of {dest}")
        finally:
            link.close()

    def teardown(self) -> None:
        link = self.connect()
        artemis = link.artemis
        link.close()
        if not artemis:
            LOG.debug("artemis: ActiveMQ 5 cannot remove queue %s over STOMP: it stays", self.queue)
            return

        def build(reply_to: str) -> list[tuple[str, bytes, dict[str, str]]]:
            return [
                management_frame(
                    "broker", reply_to, operation="destroyQueue", params=[self.queue, True, True]
                )
            ]

        try:
            [[(headers, body)]] = self._request(
                build, f"destroyQueue {self.queue}", text_bodies=True
            )
            management_result(headers, body)
        except DriverError as e:
            LOG.debug("artemis: teardown of %s: %s", self.queue, e)

    def sender(self) -> Sender:
        return StompSender(self)

    def receiver(self) -> Receiver:
        return StompReceiver(self)

    @property
    def redelivery_timeout_s(self) -> float:
        return 0.0  # only a closed connection returns unacked messages

    def remaining(self, identify: bool = False) -> Remaining:
        """Messages stored and not acked (in flight included) and, as ``in_flight``, those
        dispatched to subscriptions and not acked (module docstring)."""
        probe = self.connect()
        artemis = probe.artemis
        probe.close()
        if artemis:
            return self._artemis_remaining()
        return self._activemq_remaining()

    def _activemq_remaining(self) -> Remaining:
        def build(reply_to: str) -> list[tuple[str, bytes, dict[str, str]]]:
            headers = {"reply-to": reply_to, STATS_END: "true"}
            return [(f"/queue/{STATS_PREFIX}{self.queue}", b"", headers)]

        [replies] = self._request(build, f"statistics of {self.queue}", is_end=stats_end)
        for _headers, body in replies:
            stats = parse_stats_map(body)
            if stats.get("destinationName") == f"queue://{self.queue}":
                return Remaining(int(stats["size"]), None, int(stats.get("inflightCount", 0)))
        raise DriverError(
            f"artemis: the broker has no statistics for queue {self.queue} (no such queue, or "
            "no statisticsBrokerPlugin)"
        )

    def _artemis_remaining(self) -> Remaining:
        def build(reply_to: str) -> list[tuple[str, bytes, dict[str, str]]]:
            return [
                management_frame(f"queue.{self.queue}", reply_to, attribute=a)
                for a in ("messageCount", "deliveringCount")
            ]

        [[count], [delivering]] = self._request(
            build, f"management of {self.queue}", text_bodies=True
        )
        try:
            return Remaining(
                int(management_result(*count)), None, int(management_result(*delivering))
            )
        except (TypeError, ValueError) as e:
            raise DriverError(f"artemis: management replies without counts: {e}") from e

    def replication(self) -> dict[str, Any]:
        """What the serving node says over its management address: ``backup`` (whether
        it is one), ``replica_sync`` (its backup has caught up with its journal),
        ``version``, ``node_id`` and ``topology`` (the primary/backup pairs it knows)."""
        attrs = ("backup", "replicaSync", "version", "nodeID")

        def build(reply_to: str) -> list[tuple[str, bytes, dict[str, str]]]:
            frames = [management_frame("broker", reply_to, attribute=a) for a in attrs]
            frames.append(management_frame("broker", reply_to, operation="listNetworkTopology"))
            return frames

        replies = self._request(build, "broker management", text_bodies=True)
        values = [management_result(*r[0]) for r in replies]
        topology = json.loads(values[-1]) if isinstance(values[-1], str) else values[-1]
        return {
            "backup": bool(values[0]),
            "replica_sync": bool(values[1]),
            "version": str(values[2]),
            "node_id": str(values[3]),
            "topology": list(topology or []),
        }

    def server_versions(self) -> list[str]:
        """The ``server`` header of every node that accepts a connection (a waiting
        ActiveMQ 5 slave or Artemis backup does not)."""
        out = []
        for host, port in self.hosts:
            try:
                link = connect([(host, port)], self.settings, timeout_s=2.0)
            except DriverError:
                LOG.debug("artemis: no STOMP connection to %s:%s", host, port)
                continue
            out.append(f"{link.server or '?'} ({host}:{port})")
            link.close()
        return out


DRIVER = ArtemisDriver
