"""Apache Pulsar (pulsar-client): one persistent topic, one shared subscription.

- setup: the namespace's persistence (``ensemble_size``, ``write_quorum`` and
  ``ack_quorum`` bookies for every ledger) and the topic
  ``persistent://public/default/<queue>`` through the admin REST API, then the durable
  shared subscription ``<queue>-workers``, made before anything is sent (Pulsar keeps
  messages only for the subscriptions that exist).
- send: a producer per sender, every message its own entry (no batching). A batch is
  confirmed once the broker persisted each of its messages (on real Pulsar:
  ``ack_quorum`` bookies have fsynced each entry). Where ``mqlab._sendpath`` is built, a
  worker's senders go in lanes (``mqlab/brokers/pulsar/lane.py``): each its own
  connection and producer, made in the binary protocol, all driven from one thread by
  the compiled loop, which writes each message's SEND frame and reads its receipt; a
  SEND_ERROR, a broker that closes the producer, a receipt out of order or none within
  ``send_timeout_s`` fail the batch and drop the connection (the next batch connects
  again). ``send`` (without lanes) goes through pulsar-client: all of a driver's
  senders on one client, every message handed to the C++ producer, then ``flush``; a
  message whose result is an error, a producer whose last acknowledged sequence id moved
  by less than the batch's size, or a ``flush`` that failed (after ``send_timeout_s``)
  fails the send (``PulsarSender``).
- receive: a shared-subscription consumer whose receiver queue (``prefetch``) the broker
  fills ahead of ``receive()``, which hands messages out from that local buffer: the first
  waits up to the timeout, the rest of the batch only take what is already there. The
  broker dispatches a message to one consumer's queue at a time, so it is hidden from the
  others until it is acked or comes again.
- ack: individual acks (``acknowledge`` per message); the client groups them and writes
  them within 100 ms, and ``close`` writes what is left. ``ack`` returning means the acks
  were handed to the client, not that the broker confirmed them. The driver does not
  track what it handed out: an ack of a message not handed out is up to the broker.
- redelivery (at least once): the client's ack timeout (``ack_timeout_s``, at least 10 s
  in pulsar-client) asks the broker to deliver a received-but-unacked message again,
  counted from ``receive()`` (not from its arrival in the receiver queue); a consumer
  that closes or dies returns everything it held, queue included, to the subscription at
  once. A delivery is flagged redelivered when the broker's redelivery count is above 0.
- remaining: the topic stats' backlog of the subscription (ready plus
  delivered-but-unacked) and, as ``in_flight``, its unacked count (including what open
  consumers hold in their receiver queues), from the admin REST API. Messages cannot be
  read without consuming them (``identify`` gives no payloads).
- the admin REST API answers a topic operation on a broker that does not own the topic
  with a redirect (307) to the owner: followed with the same method and body.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import _pulsar
import pulsar

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import Delivery, Driver, Receiver, Remaining, Sender
from mqlab.brokers.pulsar.lane import PRODUCER_ID, LaneConn
from mqlab.brokers.pulsar.stats import parse_topic_stats
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)

TENANT_NAMESPACE = "public/default"
MIN_ACK_TIMEOUT_S = 10.0  # pulsar-client refuses a shorter ack timeout
ACK_GROUPING_S = 0.3  # pulsar-client writes grouped acks within 100 ms
HTTP_TIMEOUT_S = 10.0
_sendpath: Any = compiled.module  # None where the install did not build it
ST_OK = 0  # mqlab._sendpath.Lanes' outcomes (mqlab/_sendpath.c)
ST_TIMEOUT = 2


def client_logger() -> Any:
    """Where pulsar-client logs (warnings and errors): to stderr, never stdout (its default;
    a worker's stdout carries its events). Not through a Python logger: with one, the
    client's threads log into a finalizing interpreter at exit and the process sometimes
    aborts ("terminate called without an active exception", exit -6; seen in pulsar-short
    here, and apache/pulsar-client-python issue 256)."""
    return pulsar.FileLogger(pulsar.LoggerLevel.Warn, "/dev/stderr")


@dataclass(frozen=True)
class Settings:
    ensemble_size: int = spec(3, min=1, max=15, help="bookies each ledger is striped over")
    write_quorum: int = spec(3, min=1, max=15, help="bookies each entry is written to")
    ack_quorum: int = spec(2, min=1, max=15, help="bookies that must confirm each entry")
    prefetch: int = spec(
        1000,
        min=1,
        max=100_000,
        help="the consumer's receiver queue: messages the broker sends each receiver "
        "ahead of receive() (pulsar-client's default is 1000)",
    )
    ack_timeout_s: float = spec(
        30.0,
        min=MIN_ACK_TIMEOUT_S,
        help="a received message not acked this long is delivered again (client-side)",
    )
    send_timeout_s: float = spec(30.0, min=1.0)
    operation_timeout_s: int = spec(30, min=1, help="pulsar-client's timeout for lookups etc.")


def topic_name(queue: str) -> str:
    return f"persistent://{TENANT_NAMESPACE}/{queue}"


def service_url(endpoints: Any) -> str:
    return "pulsar://" + ",".join(f"{n.host}:{n.port}" for n in endpoints.nodes)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # 307/308 come back as HTTPError; _http follows them itself


_OPENER = urllib.request.build_opener(_NoRedirect)
MAX_REDIRECTS = 5


def _http(method: str, url: str, body: Any = None) -> str:
    """``method`` on ``url``; a 307/308 (a broker sends topic operations on to the broker
    that owns the topic) is followed with the same method and body."""
    data = None if body is None else json.dumps(body).encode()
    for _ in range(MAX_REDIRECTS):
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with _OPENER.open(req, timeout=HTTP_TIMEOUT_S) as resp:
                return str(resp.read().decode())
        except urllib.error.HTTPError as e:
            location = e.headers.get("Location") if e.code in (307, 308) else None
            if not location:
                raise
            url = urllib.parse.urljoin(url, location)
    raise DriverError(f"pulsar: more than {MAX_REDIRECTS} redirects from {url}")


def _client(driver: PulsarDriver) -> pulsar.Client:
    s: Settings = driver.settings
    try:
        return pulsar.Client(
            service_url(driver.endpoints),
            operation_timeout_seconds=s.operation_timeout_s,
            logger=client_logger(),
        )
    except (pulsar.PulsarException, ValueError) as e:
        raise DriverError(f"pulsar: cannot make a client for {driver.endpoints}: {e}") from e


class SharedClient:
    """One pulsar-client for all the senders of a driver (a worker's senders of one queue),
    as ``pulsar-perf produce`` runs its producers on one client: one set of connections
    and I/O threads instead of one per sender. Made by the first sender that opens it,
    closed when the last one closes."""

    def __init__(self, make: Callable[[], pulsar.Client]):
        self.make = make
        self.lock = threading.Lock()
        self.client: pulsar.Client | None = None
        self.users = 0

    def open(self) -> pulsar.Client:
        with self.lock:
            if self.client is None:
                self.client = self.make()
            self.users += 1
            return self.client

    def close(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users or self.client is None:
                return
            client, self.client = self.client, None
        with contextlib.suppress(pulsar.PulsarException):
            client.close()


class PulsarSender(Sender):
    """A producer of its own on the driver's shared client. A batch: each message built
    with pulsar-client's own ``MessageBuilder`` and handed to the C++ producer
    (``send_async``), then ``flush``, which returns once the broker persisted the last
    one (a producer's messages are acknowledged in order). Each message's result comes to
    a builtin (a dict's ``__setitem__``: no Python frame, the interpreter lock held for
    a moment in the client's thread); the batch is confirmed when no result was an error
    and the producer's last acknowledged sequence id moved by at least the batch's size
    (more can come: an earlier failed batch's messages acknowledged late).
    ``pulsar.Producer.send_async`` did the same per message through its schema, ten type
    checks and a Python callback: this path takes about half the client CPU per message
    (docs/development.md)."""

    def __init__(self, driver: PulsarDriver):
        s: Settings = driver.settings
        self.driver = driver
        self.timeout_s = s.send_timeout_s
        self.shared = driver.clients
        self.producer: Any = None  # pulsar-client's, for send(); where lanes go, only if asked
        self.p: Any = None
        if self.lane_proto is None:
            self._open()
        self.lane = LaneConn(driver.endpoints, driver.topic, s.send_timeout_s)
        self.lane_spec: tuple[Any, ...] | None = None  # a lane's run spec, for lane_pool
        self.lane_pool: envelope.PayloadPool | None = None

    def _open(self) -> None:
        client = self.shared.open()
        try:
            self.producer = client.create_producer(
                self.driver.topic,
                send_timeout_millis=int(self.timeout_s * 1000),
                block_if_queue_full=True,
                batching_enabled=False,  # one entry per message: acked and redelivered alone
            )
        except pulsar.PulsarException as e:
            self.shared.close()
            raise DriverError(
                f"pulsar: cannot create a producer on {self.driver.topic}: {e}"
            ) from e
        self.p = self.producer._producer  # the C++ producer (pulsar-client's own binding)

    def send(self, batch: Sequence[bytes]) -> None:
        if self.p is None:
            self._open()
        results: dict[Any, Any] = {}
        note = results.__setitem__  # (result, message id): every result the batch got
        before = self.p.last_sequence_id()
        try:
            for m in batch:
                b = _pulsar.MessageBuilder()
                b.content(m)
                self.p.send_async(b.build(), note)
            self.p.flush()  # the last one persisted (or failed after send_timeout_s)
        except pulsar.PulsarException as e:
            raise DriverError(f"pulsar: send failed: {e}") from e
        acked = self.p.last_sequence_id() - before
        errors = [str(r) for r in results if r != pulsar.Result.Ok]
        if errors or acked < len(batch):  # more: an earlier failed batch's, sent again
            raise DriverError(
                f"pulsar: {acked} of {len(batch)} messages acknowledged, errors: {errors[:3]}"
            )

    # -- lanes (mqlab._sendpath.Lanes, PROTO_PULSAR): each batch a SEND frame per message
    # from the sender's own connection and producer (mqlab.brokers.pulsar.lane), done once
    # every message's receipt came; any failure drops the connection (the next connects) --
    lane_proto = _sendpath.PULSAR if _sendpath is not None else None

    def lane_timeout_ns(self) -> int:
        return int(self.timeout_s * 1e9)

    def lane_connected(self) -> bool:
        return self.lane.sock is not None

    def lane_connect(self) -> None:
        self.lane.connect()

    def lane_args(
        self, sender: int, pool: envelope.PayloadPool
    ) -> tuple[int, tuple[Any, ...], int, int]:
        if self.lane.sock is None:
            raise DriverError("pulsar: send failed: not connected")
        spec = self.lane_spec
        if (
            spec is None
            or spec[6] != sender
            or spec[0] != self.lane.producer_name
            or self.lane_pool is not pool
        ):
            self.lane_pool = pool
            spec = self.lane_spec = (
                self.lane.producer_name,
                PRODUCER_ID,
                b"".join(pool._pads),
                len(pool._pads),
                envelope.MAGIC,
                envelope.VERSION,
                sender,
            )
        return self.lane.fd, spec, 0, self.lane.generation

    def lane_outcome(self, status: int, integer: int, message: str | None) -> Exception | None:
        if status == ST_OK:
            return None
        self.lane.close()  # whatever failed, the producer's sequence is out of step: anew
        if status == ST_TIMEOUT:
            why = f"no receipt within send_timeout_s = {self.timeout_s:g} s"
        else:
            why = message or "the connection failed"
        return DriverError(f"pulsar: send failed: {why}")

    def close(self) -> None:
        self.lane.close()
        if self.producer is None:
            return
        with contextlib.suppress(pulsar.PulsarException):
            self.producer.close()
        self.shared.close()


class PulsarReceiver(Receiver):
    def __init__(self, driver: PulsarDriver):
        s: Settings = driver.settings
        self.client = _client(driver)
        try:
            self.consumer = driver.subscribe(
                self.client,
                receiver_queue_size=s.prefetch,
                unacked_messages_timeout_ms=int(s.ack_timeout_s * 1000),
            )
        except (pulsar.PulsarException, ValueError) as e:
            self.client.close()
            raise DriverError(
                f"pulsar: cannot subscribe {driver.subscription} to {driver.topic}: {e}"
            ) from e

    def _one(self, timeout_ms: int) -> Delivery | None:
        try:
            m = self.consumer.receive(timeout_ms)
        except pulsar.Timeout:
            return None
        except pulsar.PulsarException as e:
            raise DriverError(f"pulsar: receive failed: {e}") from e
        return Delivery(m.data(), m.message_id(), m.redelivery_count() > 0)

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        first = self._one(max(0, int(timeout_s * 1000)))
        if first is None:
            return []
        out = [first]
        while len(out) < max_messages:  # the rest: only what the receiver queue holds
            more = self._one(0)
            if more is None:
                break
            out.append(more)
        return out

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        try:
            for d in deliveries:
                self.consumer.acknowledge(d.handle)
        except pulsar.PulsarException as e:
            raise DriverError(f"pulsar: ack failed: {e}") from e

    def close(self) -> None:
        with contextlib.suppress(pulsar.PulsarException):
            self.consumer.close()  # writes the acks still grouped in the client
        with contextlib.suppress(pulsar.PulsarException):
            self.client.close()


class PulsarDriver(Driver):
    name = "pulsar"
    Settings = Settings
    client_libraries = ("pulsar-client",)
    identifies_remaining = False

    def __init__(self, settings: Any, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        self.topic = topic_name(queue)
        self.subscription = f"{queue}-workers"
        extra = endpoints.extra
        self.admin: list[str] = list(extra.get("admin_urls") or [])
        self.clients = SharedClient(functools.partial(_client, self))  # the senders' client
        if not self.admin:
            raise DriverError(
                f"pulsar: the endpoints name no admin REST API (extra.admin_urls): {endpoints}"
            )

    # -- admin REST -----------------------------------------------------
    def _admin(self, method: str, path: str, body: Any = None) -> str:
        """``method`` on the first admin URL that answers; HTTP errors are raised."""
        last: Exception | None = None
        for base in self.admin:
            try:
                return _http(method, base.rstrip("/") + path, body)
            except urllib.error.HTTPError:
                raise
            except OSError as e:  # that broker is down: try the next one
                last = e
        raise DriverError(f"pulsar: no admin API answers ({', '.join(self.admin)}): {last}")

    def _topic_path(self) -> str:
        return f"/admin/v2/persistent/{TENANT_NAMESPACE}/{urllib.parse.quote(self.queue)}"

    def setup(self) -> None:
        s: Settings = self.settings
        if not s.ack_quorum <= s.write_quorum <= s.ensemble_size:
            raise DriverError(
                f"pulsar: ack quorum {s.ack_quorum} <= write quorum {s.write_quorum} <= "
                f"ensemble {s.ensemble_size} does not hold"
            )
        persistence = {
            "bookkeeperEnsemble": s.ensemble_size,
            "bookkeeperWriteQuorum": s.write_quorum,
            "bookkeeperAckQuorum": s.ack_quorum,
            "managedLedgerMaxMarkDeleteRate": 0.0,
        }
        try:
            self._admin("POST", f"/admin/v2/namespaces/{TENANT_NAMESPACE}/persistence", persistence)
        except urllib.error.HTTPError as e:
            raise DriverError(f"pulsar: cannot set {TENANT_NAMESPACE}'s persistence: {e}") from e
        try:
            self._admin("PUT", self._topic_path())
        except urllib.error.HTTPError as e:
            if e.code != 409:  # 409: the topic exists
                raise DriverError(f"pulsar: cannot create {self.topic}: {e}") from e
        client = _client(self)
        try:  # the durable subscription: from now on the topic keeps what is sent
            self.subscribe(client).close()
        except pulsar.PulsarException as e:
            raise DriverError(f"pulsar: cannot subscribe to {self.topic}: {e}") from e
        finally:
            client.close()

    def subscribe(self, client: pulsar.Client, **options: Any) -> pulsar.Consumer:
        """A consumer of the shared subscription."""
        return client.subscribe(
            self.topic,
            self.subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            **options,
        )

    def teardown(self) -> None:
        client = _client(self)
        try:
            self.subscribe(client).unsubscribe()
        except pulsar.PulsarException as e:
            LOG.debug("pulsar: unsubscribe %s: %s", self.subscription, e)
        finally:
            client.close()
        try:
            self._admin("DELETE", self._topic_path() + "?force=true")
        except (urllib.error.HTTPError, DriverError) as e:
            LOG.debug("pulsar: delete %s: %s", self.topic, e)

    @property
    def redelivery_timeout_s(self) -> float:
        s: Settings = self.settings
        return s.ack_timeout_s

    def remaining(self, identify: bool = False) -> Remaining:
        """The subscription's backlog and unacked count (see the module docstring)."""
        time.sleep(ACK_GROUPING_S)  # acks the client still groups reach the broker
        try:
            stats = json.loads(self._admin("GET", self._topic_path() + "/stats"))
        except (urllib.error.HTTPError, ValueError) as e:
            raise DriverError(f"pulsar: no stats for {self.topic}: {e}") from e
        found = parse_topic_stats(stats, self.subscription)
        if found is None:
            raise DriverError(f"pulsar: no stats for subscription {self.subscription}")
        backlog, unacked = found
        return Remaining(backlog, None, unacked)

    def sends_in_lanes(self) -> bool:
        return compiled.module is not None

    def sender(self) -> Sender:
        return PulsarSender(self)

    def receiver(self) -> Receiver:
        return PulsarReceiver(self)

    def server_versions(self) -> list[str]:
        server = self.endpoints.extra.get("server")
        if server:
            return [str(server)]
        out = []
        for base in self.admin:
            try:
                version = _http("GET", base.rstrip("/") + "/admin/v2/brokers/version")
            except OSError as e:
                LOG.debug("pulsar: version of %s: %s", base, e)
                continue
            out.append(f"Apache Pulsar {version.strip().strip(chr(34))} ({base})")
        return out


DRIVER = PulsarDriver
