"""Apache RocketMQ 5.x: one topic per run and one consumer group reading it, through one of
two clients (the ``client`` setting):

- ``remoting`` (the default): mqlab's own connections speaking RocketMQ's remoting
  protocol straight to the broker group's master, as RocketMQ's Java clients and its
  benchmark tools do: a batch in one SEND_BATCH_MESSAGE, pops of ``read_ahead`` read
  ahead, a batch's acks in one BATCH_ACK_MESSAGE (``direct.py`` says what each does,
  ``remoting.py`` the bytes). Same semantics as below (pop with an invisible duration,
  each message acked, at least once), without the Python gRPC client's cost per call: its
  receive path took 2.6 ms of CPU per batch of 10 (docs/development.md).
- ``grpc``: the official ``rocketmq-python-client`` (import name ``rocketmq``) through the
  proxy, as the rest of this docstring says (its sender: ``producer.py``; its receiver:
  ``receiver.py``).

- topic and group: ``topic_name(queue)`` with ``queues`` read and write queues, message
  type NORMAL; the group is ``<topic>-workers`` (a broker creates a subscription group on
  its first use). ``setup`` creates the topic on every node's broker (the master first)
  and waits until a name server routes it and every broker holds it; ``teardown``
  deletes it from the brokers and the name servers. Both speak RocketMQ's remoting
  protocol (``mqlab.brokers.rocketmq.admin``): the gRPC client has no admin calls and the
  proxy does not create topics on first use.
- send: the whole batch in one SendMessage call (``send_batch``: client 5.1.2 sends one
  message per call, so the request is built by the client's own private steps and their
  messages joined), awaited at most ``send_timeout_s``. The proxy stores it as one batch:
  SEND_OK once a majority of the DLedger group appended all of its messages to their Raft
  log (in controller mode: once the replicas ``replication`` names have them, and the
  master flushed them with ``flush = "sync"``; ``layout.py``). A failed or unconfirmed
  batch fails (DriverError) and the runner retries it: a batch stored by an attempt whose
  answer was lost can be stored twice (mqlab counts duplicates). One call per batch
  instead of one per message: 722 against 215 msgs/s for
  8 senders of batches of 10 on the local cluster (2026-11-27). A client without those
  steps sends each message with ``send_async`` (which retries each itself, 3 attempts).
- a route with no writable queue: the client caches each topic's route and looks it up
  again only every 30 s. Killing the group's leader leaves the name server with no broker
  id 0 for some seconds (until Raft elected another leader and it registered as master),
  and a route looked up then lists no writable queue: every send fails at once ("no
  available message queues") until the next lookup, 30 s later, which outlasts a worker's
  error budget. Worse, the client's own retry of a failed send picks its queue from that
  empty route inside a callback, which raises there: that message's future is never
  resolved and its batch waits out ``send_timeout_s``. So a sender's producer keeps the
  queues it had while a new route lists no writable queue (with one broker group they are
  the same queues, reached through the proxy, which sends to whichever broker is master
  by then, refusing with "no writable queue" until it knows one): a send fails fast and
  the runner retries it. A producer whose first route was already empty (started in that
  window) asks the proxy for the topic's route as soon as a send fails with "no available
  message queues" (the client's own lookup, ``route_manager.update_topic_route``), at most
  once per ``ROUTE_LOOKUP_EVERY_S``; the batch fails (DriverError) and the runner's retry
  goes through the new route. A receiver whose route lists no queue starts its consumer
  again (at most every ``RENEW_EVERY_S``), which looks the route up at its start.
- receive: one ``SimpleConsumer.receive`` (a ReceiveMessage call: the broker group the
  client picks, here the one DLedger group, pops up to ``max_messages`` of the topic's
  messages, at most 32) with ``invisible_duration_s``:
  the broker hides those messages from every consumer of the group for that long, and
  delivers again every one not acked by then (at least once). Nothing is read ahead: what a
  call returns is handed out at once. A call with nothing to pop long-polls for
  ``long_poll_s`` (the proxy raises shorter polls to its minimum, 5 s by default), so an
  idle ``receive`` can return later than ``timeout_s``; a message that arrives meanwhile
  is returned when it arrives. A delivery is flagged redelivered when its
  ``delivery_attempt`` is above 1. A message whose body fails the client's checksum is not
  handed out (logged; its invisible duration runs out and it comes again).
- ack (``receiver.py``): the batch's acks in one AckMessage call per proxy and topic
  (an entry per delivery, each answered; client 5.1.2 sends one entry per call, so the
  request is built by its own private step and the entries joined); ``ack`` returning
  means the broker confirmed every ack. An ack the broker refuses (its receipt handle
  expired: the message is visible again) or that fails is reported with DriverError once
  the others were tried; its message comes again. A delivery this receiver did not hand
  out, or acked already, is not acked (DriverError, after acking the others).
- close: the consumer shuts down; its unacked deliveries come again once their invisible
  duration ends (a closed connection does not return them earlier).
- remaining: what no receiver took yet, from the group leader's consume stats (remoting
  GET_CONSUME_STATS, ``admin.consume_stats``): per queue, its end offset less the group's
  offset (a pop moves the offset at once), over the run's topic and the group's pop retry
  topic (``%RETRY%<group>_<topic>``, where the broker puts back what was not acked in time).
  ``in_flight`` is not known (None): a popped, unacked message is in neither until its
  invisible duration ends and the broker revives it, some seconds later; mqlab's drain then
  asks the receivers whether every delivery was acked, and after a fault trusts "empty"
  only once the invisible duration has passed since (``hides_cut_off_receives``: a pop
  the fault cut off took messages no receiver got). The leader is the group's broker id
  0, as a name server lists it. Not identified (``payloads`` None).
- ``redelivery_timeout_s`` is ``invisible_duration_s``.

Endpoints: one node per RocketMQ node, ``host``/``port`` its proxy's gRPC port (what
senders and receivers use); ``extra`` per node: ``broker`` (the broker's remoting port)
and ``namesrv`` (its name server's port), used by setup and teardown.

The client library is imported on first use, not with this module (``library.py``).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mqlab.brokers import compiled
from mqlab.brokers.base import Driver, Endpoints, LaneReceipt, Receiver, Remaining, Sender
from mqlab.brokers.rocketmq import admin, lanes, layout
from mqlab.brokers.rocketmq.direct import DirectReceiver, DirectSender
from mqlab.brokers.rocketmq.library import client, describe, shutdown
from mqlab.brokers.rocketmq.producer import RocketmqSender
from mqlab.brokers.rocketmq.receiver import RocketmqReceiver
from mqlab.errors import DriverError
from mqlab.typed import SettingsProblem, spec

LOG = logging.getLogger(__name__)
MAX_TOPIC = 127  # RocketMQ's longest topic name
_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9_-]+$")
ROUTE_POLL_S = 0.2
SETTINGS_WAIT_S = 10.0


CLIENTS = ("remoting", "grpc")


@dataclass(frozen=True)
class Settings:
    client: str = spec(
        "remoting",
        choices=CLIENTS,
        help="remoting: mqlab's own connections to the broker group's master, as "
        "RocketMQ's Java clients (mqlab/brokers/rocketmq/direct.py); grpc: the official "
        "Python client through the proxy",
    )
    queues: int = spec(8, min=1, max=1024, help="read and write queues of the run's topic")
    read_ahead: int = spec(
        32,
        min=1,
        max=32,
        help="client remoting: messages a receive pops at once (at most the broker's 32); "
        "those beyond what it hands out wait in the receiver for the next receives, "
        "hidden from other receivers meanwhile, as the Java push consumer's pulls of 32",
    )
    invisible_duration_s: int = spec(
        30,
        min=1,
        max=43_200,
        help="how long a received message stays hidden before it is delivered again "
        "(a proxy accepts up to 12 h, and from 10 s unless configured lower: mqlab's "
        "local proxy accepts 1 s)",
    )
    long_poll_s: int = spec(
        5, min=5, max=20, help="how long a receive waits on the proxy when nothing is there"
    )
    request_timeout_s: int = spec(3, min=1, max=60, help="the client's per-call timeout")
    send_timeout_s: float = spec(30.0, min=0.1, help="a batch not confirmed by then fails")
    admin_timeout_s: float = spec(10.0, min=0.1, help="creating and deleting the topic")
    replication: str = spec(
        "quorum",
        choices=layout.REPLICATIONS,
        help="the servers' layout (mqlab/brokers/rocketmq/layout.py): quorum: a DLedger "
        "group, a send answered once 2 of 3 appended it; all_in_sync: controller mode, once "
        "every in-sync replica has it; async: controller mode, once the master has it",
    )
    flush: str = spec(
        "async",
        choices=layout.FLUSHES,
        help="sync: the master answers once the message is on its disk (SYNC_FLUSH; "
        "controller mode only); async: the OS writes it out later",
    )

    def __post_init__(self) -> None:
        if self.flush == "sync" and self.replication == "quorum":
            raise SettingsProblem(
                "flush",
                "a DLedger group (replication = quorum) flushes on its own timer and "
                "ignores SYNC_FLUSH",
                'set replication = "all_in_sync" (or "async") for flush = "sync"',
            )

    def server(self) -> dict[str, str]:
        """What the servers must be started with for this profile (``layout.py``)."""
        return layout.server_config(self.replication, self.flush)


def topic_name(queue: str) -> str:
    """The run's topic: ``queue`` itself when RocketMQ accepts it, else a safe name with a
    hash of ``queue`` (so that different queues never share a topic)."""
    if _TOPIC_CHARS.match(queue) and len(queue) <= MAX_TOPIC:
        return queue
    digest = hashlib.sha256(queue.encode()).hexdigest()[:12]
    safe = re.sub(r"[^a-zA-Z0-9_-]", "_", queue)[: MAX_TOPIC - len(digest) - 3]
    return f"q_{safe}_{digest}"


def group_name(topic: str) -> str:
    return f"{topic}-workers"


def retry_topic(group: str, topic: str) -> str:
    """Where a broker puts back the group's popped messages not acked in time."""
    return f"%RETRY%{group}_{topic}"


def access_point(endpoints: Endpoints) -> str:
    """The proxies' gRPC addresses as the client takes them (``host:port;host:port``)."""
    if not endpoints.nodes:
        raise DriverError("rocketmq: no node to connect to")
    return ";".join(f"{n.host}:{n.port}" for n in endpoints.nodes)


def admin_addresses(endpoints: Endpoints, port: str) -> list[tuple[str, int]]:
    """Every node's ``port`` (``broker`` or ``namesrv``) from the endpoints' extras, on
    the host they name for it (``<port>_host``: the local launcher's, whose clients reach
    every node through one proxy), else on the node's own host (the images')."""
    out = []
    for n in endpoints.nodes:
        if port not in n.extra:
            raise DriverError(f"rocketmq: node {n.index} has no {port} port in its endpoints")
        out.append((str(n.extra.get(f"{port}_host", n.host)), int(n.extra[port])))
    return list(dict.fromkeys(out))


class RocketmqDriver(Driver):
    name = "rocketmq"
    Settings = Settings
    client_libraries = ("rocketmq-python-client", "grpcio", "protobuf")
    hides_cut_off_receives = True  # a popped message is hidden, uncounted, until revived

    def __init__(self, settings: Any, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        self.topic = topic_name(queue)
        self.group = group_name(self.topic)

    # -- the client library (replaced in unit tests) -------------------------------------
    def configuration(self) -> Any:
        rmq = client()
        return rmq.ClientConfiguration(
            access_point(self.endpoints),
            rmq.Credentials(),
            request_timeout=self.settings.request_timeout_s,
        )

    def new_message(self, payload: bytes) -> Any:
        m = client().Message()
        m.topic = self.topic
        m.body = payload
        return m

    def new_producer(self) -> Any:
        return client().Producer(self.configuration(), topics=[self.topic])

    def new_consumer(self) -> Any:
        rmq = client()
        return rmq.SimpleConsumer(
            self.configuration(),
            self.group,
            subscription={self.topic: rmq.FilterExpression()},
            await_duration=self.settings.long_poll_s,
        )

    def _started(self, make: Any, what: str) -> Any:
        try:
            c = make()
            c.startup()
        except Exception as e:
            raise DriverError(
                f"rocketmq: cannot start a {what} on {access_point(self.endpoints)}: {describe(e)}"
            ) from e
        # A simple consumer's startup does not wait for the proxy's answer to the client's
        # settings (client 5.1.2), and a ReceiveMessage sent before it fails on the proxy
        # ("settings is null"): wait for that answer as the client waits for a push
        # consumer's (its private event; absent in other clients).
        settled = getattr(c, "_init_settings_event", None)
        if isinstance(settled, threading.Event) and not settled.wait(SETTINGS_WAIT_S):
            shutdown(c)
            raise DriverError(
                f"rocketmq: the proxy on {access_point(self.endpoints)} sent the {what} no "
                f"settings within {SETTINGS_WAIT_S:g} s"
            )
        return c

    def namesrvs(self) -> list[tuple[str, int]]:
        """Every name server the endpoints name, once each (nodes share them)."""
        return list(dict.fromkeys(admin_addresses(self.endpoints, "namesrv")))

    def sender(self) -> Sender:
        if self.settings.client == "remoting":
            return DirectSender(self, self.namesrvs())
        return RocketmqSender(self, self._started(self.new_producer, "producer"))

    def receiver(self) -> Receiver:
        if self.settings.client == "remoting":
            return DirectReceiver(self, self.namesrvs())
        return RocketmqReceiver(self, self._started(self.new_consumer, "simple consumer"))

    def receives_in_lanes(self) -> bool:
        """With the remoting client, a worker's receivers are driven from one thread
        (:meth:`receive_lanes`, ``lanes.py``)."""
        return self.settings.client == "remoting"

    def receive_path(self) -> str:
        """ "compiled-lanes" where pop answers are read in C (``mqlab._recvpath``), else
        "lanes" (read in Python); "python" with the gRPC client."""
        if not self.receives_in_lanes():
            return "python"
        return "compiled-lanes" if compiled.recv_module is not None else "lanes"

    def receive_lanes(
        self,
        receivers: Sequence[Receiver],
        max_messages: int,
        until_ns: int,
        wall_offset_ns: int,
        wake_fd: int,
    ) -> list[LaneReceipt]:
        """Each receiver's pops in flight together, recorded and acked as they come
        (``lanes.py`` says how); every batch acked by the time it returns unless its
        receiver failed."""
        if self.settings.client != "remoting":
            raise NotImplementedError('rocketmq: receivers in lanes need client = "remoting"')
        return lanes.receive_lanes(receivers, max_messages, until_ns, wall_offset_ns, wake_fd)

    # -- the topic -----------------------------------------------------------------------
    def setup(self) -> None:
        """Create the topic on every node's broker, the group's master first, wait until a
        name server routes it and every broker that answers holds it. A DLedger follower
        copies the master's topic table every 10 s and drops what the master lacks: one
        that created the topic before the master can lose it for those 10 s, and a leader
        killed then would leave a new leader without the topic (receives fail with "topic
        not exist"). Creating it again changes nothing."""
        s: Settings = self.settings
        brokers = admin_addresses(self.endpoints, "broker")
        namesrvs = admin_addresses(self.endpoints, "namesrv")
        master = admin.master_address(namesrvs, s.admin_timeout_s)
        errors = []
        for broker in sorted(brokers, key=lambda b: f"{b[0]}:{b[1]}" != master):
            try:
                admin.create_topic(broker, self.topic, s.queues, s.admin_timeout_s)
            except DriverError as e:
                errors.append(e)
                LOG.warning("%s", e)
        if len(errors) == len(brokers):
            raise DriverError(f"rocketmq: no broker created topic {self.topic}: {errors[0]}")
        deadline = time.monotonic() + s.admin_timeout_s
        self._wait_routed(namesrvs, deadline)
        self._wait_held(brokers, deadline)

    def _wait_routed(self, namesrvs: list[tuple[str, int]], deadline: float) -> None:
        s: Settings = self.settings
        while True:
            for ns in namesrvs:
                try:
                    if admin.topic_routed(ns, self.topic, s.admin_timeout_s):
                        return
                except DriverError as e:
                    LOG.debug("%s", e)
            if time.monotonic() > deadline:
                raise DriverError(
                    f"rocketmq: no name server routes topic {self.topic} "
                    f"{s.admin_timeout_s:g} s after it was created"
                )
            time.sleep(ROUTE_POLL_S)

    def _wait_held(self, brokers: list[tuple[str, int]], deadline: float) -> None:
        """Until every broker that answers holds the topic (one that lost it is asked to
        create it again); a broker that does not answer is logged, not waited for."""
        s: Settings = self.settings
        while True:
            missing = []
            for b in brokers:
                try:
                    if not admin.has_topic(b, self.topic, s.admin_timeout_s):
                        missing.append(b)
                except DriverError as e:
                    LOG.warning("%s", e)
            if not missing:
                return
            if time.monotonic() > deadline:
                where = ", ".join(f"{h}:{p}" for h, p in missing)
                raise DriverError(
                    f"rocketmq: broker {where} still lacks topic {self.topic} "
                    f"{s.admin_timeout_s:g} s after it was created"
                )
            for b in missing:
                try:
                    admin.create_topic(b, self.topic, s.queues, s.admin_timeout_s)
                except DriverError as e:
                    LOG.warning("%s", e)
            time.sleep(ROUTE_POLL_S)

    def teardown(self) -> None:
        """Delete the topic from every broker, then its route from every name server;
        what is gone already or unreachable is logged."""
        s: Settings = self.settings
        for broker in admin_addresses(self.endpoints, "broker"):
            try:
                admin.delete_topic(broker, self.topic, s.admin_timeout_s)
            except DriverError as e:
                LOG.debug("%s", e)
        for ns in admin_addresses(self.endpoints, "namesrv"):
            try:
                admin.delete_route(ns, self.topic, s.admin_timeout_s)
            except DriverError as e:
                LOG.debug("%s", e)

    def leader_broker(self) -> tuple[str, int]:
        """The group's leader (broker id 0) as the first name server that answers lists it."""
        timeout_s = self.settings.admin_timeout_s
        error: DriverError | None = None
        for ns in admin_addresses(self.endpoints, "namesrv"):
            try:
                groups = admin.cluster_info(ns, timeout_s)
            except DriverError as e:
                error = e
                continue
            for members in groups.values():
                if 0 in members:
                    host, _, port = members[0].rpartition(":")
                    return host, int(port)
        raise DriverError(f"rocketmq: no broker group has a leader now ({error or 'none listed'})")

    def remaining(self, identify: bool = False) -> Remaining:
        """Messages no receiver took yet (module docstring); in flight: not known."""
        leader = self.leader_broker()
        count = 0
        for topic in (self.topic, retry_topic(self.group, self.topic)):
            stats = admin.consume_stats(leader, self.group, topic, self.settings.admin_timeout_s)
            count += sum(max(end - at, 0) for end, at in stats.values())
        return Remaining(count, None, None)

    @property
    def redelivery_timeout_s(self) -> float:
        return float(self.settings.invisible_duration_s)

    def server_versions(self) -> list[str]:
        """The gRPC protocol reports no server version: the launcher's, else each proxy."""
        server = self.endpoints.extra.get("server")
        if server:
            return [str(server)]
        return [f"RocketMQ proxy {n.host}:{n.port}" for n in self.endpoints.nodes]


DRIVER = RocketmqDriver
