"""mqlab's own logic in the EventStoreDB / KurrentDB driver, without a server: settings,
names, the connection string, one append per batch, the receive buffer and its ack
bookkeeping, redelivery flags, the remaining count, and errors as DriverError.

No EventStoreDB or KurrentDB server is obtainable on these machines, so kurrentdbclient's
client object is replaced here by a scripted one (``FakeClient``); events are the library's
own ``RecordedEvent`` and connection strings are parsed by its own ``ConnectionSpec``. What
the server does with all this is verified only on a real cluster (the cloud path)."""

from __future__ import annotations

import http.server
import json
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kurrentdbclient import RecordedEvent, StreamState
from kurrentdbclient.connection_spec import ConnectionSpec
from kurrentdbclient.exceptions import (
    AlreadyExistsError,
    DiscoveryFailedError,
    GrpcDeadlineExceededError,
    NotFoundError,
    ProgrammingError,
    ServiceUnavailableError,
)

from mqlab.brokers.base import Delivery, Endpoints, NodeEndpoint
from mqlab.brokers.eventstore import driver as es
from mqlab.brokers.eventstore import events as es_events
from mqlab.errors import DriverError, ScenarioError
from mqlab.scenario.load import load_profile
from mqlab.typed import build

ROOT = Path(__file__).resolve().parents[3]
STOP = object()
WAIT_S = 10.0  # a bound on waiting for the reader thread, never an assertion on time

# --- settings, names, addresses -------------------------------------------------------


def test_the_profile_loads_with_mqperfs_buffers() -> None:
    p = load_profile(ROOT / "scenarios" / "profiles" / "eventstore-r3.toml")
    s = p.settings
    assert p.broker == "eventstore" and isinstance(s, es.Settings)
    assert (s.prefetch, s.history_buffer_size, s.max_checkpoint_count) == (1000, 1000, 1000)
    assert s.read_batch_size < s.history_buffer_size
    assert s.consumer_strategy == "RoundRobin" and s.min_checkpoint_count == 1


@pytest.mark.parametrize(
    ("table", "key", "words"),
    [
        ({"read_batch_size": 500, "history_buffer_size": 500}, "read_batch_size", "not below"),
        ({"read_batch_size": 600, "history_buffer_size": 500}, "read_batch_size", "not below"),
        ({"min_checkpoint_count": 11, "max_checkpoint_count": 10}, "min_checkpoint_count", "above"),
        ({"consumer_strategy": "Pinned"}, "consumer_strategy", "not allowed"),
        ({"prefetch": 0}, "prefetch", "too small"),
        ({"message_timeout_s": 0.5}, "message_timeout_s", "too small"),
        ({"max_subscribers": 3}, "max_subscribers", "unknown key"),
    ],
)
def test_bad_settings_name_the_file_and_key(
    tmp_path: Path, table: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        build(es.Settings, table, tmp_path / "p.toml", "settings")
    assert err.value.key == f"settings.{key}" and words in err.value.problem
    assert str(tmp_path / "p.toml") in str(err.value) and "\n" not in str(err.value)


def test_settings_that_agree_build() -> None:
    s = build(es.Settings, {"read_batch_size": 499, "history_buffer_size": 500}, Path("p"))
    assert (s.read_batch_size, s.history_buffer_size) == (499, 500)
    assert es.Settings().read_batch_size < es.Settings().history_buffer_size


@pytest.mark.parametrize(
    ("queue_name", "stream"),
    [("jobs", "jobs"), ("mqlab_2026_1", "mqlab_2026_1"), ("$all", "q_$all"), ("", "q_")],
)
def test_stream_names_never_name_a_system_stream(queue_name: str, stream: str) -> None:
    assert es.stream_name(queue_name) == stream


def _endpoints(n: int) -> Endpoints:
    nodes = tuple(NodeEndpoint(i, f"10.0.1.{10 + i}", 2113) for i in range(n))
    return Endpoints("eventstore", nodes)


def test_the_connection_string_seeds_every_node_without_tls() -> None:
    uri = es.connection_uri(_endpoints(3), "q1")
    assert uri == (
        "kurrentdb://10.0.1.10:2113,10.0.1.11:2113,10.0.1.12:2113?Tls=false&ConnectionName=mqlab-q1"
    )
    spec = ConnectionSpec(uri)  # kurrentdbclient's own parser
    assert spec.targets == ["10.0.1.10:2113", "10.0.1.11:2113", "10.0.1.12:2113"]
    assert spec.options.tls is False and spec.options.node_preference == "leader"
    assert spec.options.connection_name == "mqlab-q1"
    with pytest.raises(DriverError, match="no node"):
        es.connection_uri(_endpoints(0), "q1")


def test_a_batch_becomes_one_event_per_message_each_with_its_own_id() -> None:
    events = es.new_events([b"a", bytearray(b"bc"), b""])
    assert [e.data for e in events] == [b"a", b"bc", b""]
    assert all(type(e.data) is bytes for e in events)
    assert {e.type for e in events} == {es_events.EVENT_TYPE}
    assert {e.content_type for e in events} == {"application/octet-stream"}
    assert len({e.id for e in events}) == 3


def _event(n: int, retry_count: int | None = 0, link: RecordedEvent | None = None) -> Any:
    return RecordedEvent(
        type=es_events.EVENT_TYPE,
        data=f"m{n}".encode(),
        metadata=b"",
        content_type="application/octet-stream",
        id=uuid.UUID(int=n + 1),
        stream_name="q",
        stream_position=n,
        commit_position=n,
        prepare_position=n,
        link=link,
        retry_count=retry_count,
    )


def test_a_delivery_is_flagged_redelivered_by_the_servers_retry_count() -> None:
    assert es.to_delivery(_event(0)).redelivered is False
    assert es.to_delivery(_event(0, retry_count=None)).redelivered is False
    again = es.to_delivery(_event(3, retry_count=2))
    assert again == Delivery(b"m3", uuid.UUID(int=4), True)
    # an event reached through a link is acked by the link's id
    linked = es.to_delivery(_event(5, link=_event(99)))
    assert linked.handle == uuid.UUID(int=100) and linked.payload == b"m5"


@pytest.mark.parametrize(("text", "number"), [("", -1), ("  ", -1), ("-1", -1), ("41", 41)])
def test_checkpoint_positions_of_a_stream_group(text: str, number: int) -> None:
    assert es.checkpoint_number(text) == number


@pytest.mark.parametrize("text", ["C:10/P:10", "x", "-2"])
def test_other_checkpoint_positions_are_refused(text: str) -> None:
    with pytest.raises(DriverError, match="unexpected checkpoint"):
        es.checkpoint_number(text)


@pytest.mark.parametrize(
    ("last", "checkpoint", "count"),
    [(None, -1, 0), (None, 7, 0), (9, -1, 10), (9, 4, 5), (9, 9, 0), (9, 12, 0), (0, -1, 1)],
)
def test_backlog_counts_the_events_after_the_checkpoint(
    last: int | None, checkpoint: int, count: int
) -> None:
    assert es.backlog(last, checkpoint) == count


# --- a scripted kurrentdbclient ---------------------------------------------------------


class FakeSubscription:
    """A persistent subscription as the receiver uses it: an iterator of events fed by
    the test (an exception fed ends it with that error), ack and nack recorded in order."""

    def __init__(self) -> None:
        self.feed: queue.Queue[Any] = queue.Queue()
        self.acked: list[uuid.UUID] = []
        self.nacked: list[tuple[uuid.UUID, str]] = []
        self.stopped = False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        item = self.feed.get()
        if item is STOP:
            raise StopIteration
        if isinstance(item, Exception):
            raise item
        return item

    def ack(self, item: uuid.UUID) -> None:
        if self.stopped:
            raise ProgrammingError("Subscription has already been stopped")
        self.acked.append(item)

    def nack(self, item: uuid.UUID, action: str) -> None:
        if self.stopped:
            raise ProgrammingError("Subscription has already been stopped")
        self.nacked.append((item, action))

    def stop(self) -> None:
        self.stopped = True
        self.feed.put(STOP)


class FakeClient:
    """kurrentdbclient.KurrentDBClient as the driver calls it; each call is recorded."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []
        self.fail: dict[str, Exception] = {}  # method -> the error it raises
        self.subs: list[FakeSubscription] = []
        self.closed = False
        self.info = SimpleNamespace(
            last_checkpointed_event_position="",
            parked_message_count=0,
            total_in_flight_messages=0,
        )
        self.version: Any = StreamState.NO_STREAM
        self.streams: dict[str, list[Any]] = {}

    def _call(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        if name in self.fail:
            raise self.fail[name]

    def append_to_stream(self, stream: str, **kwargs: Any) -> int:
        self._call("append_to_stream", stream, **kwargs)
        return 0

    def read_subscription_to_stream(self, group: str, stream: str, **kwargs: Any) -> Any:
        self._call("read_subscription_to_stream", group, stream, **kwargs)
        self.subs.append(FakeSubscription())
        return self.subs[-1]

    def create_subscription_to_stream(self, group: str, stream: str, **kwargs: Any) -> None:
        self._call("create_subscription_to_stream", group, stream, **kwargs)

    def delete_subscription(self, group: str, **kwargs: Any) -> None:
        self._call("delete_subscription", group, **kwargs)

    def delete_stream(self, stream: str, **kwargs: Any) -> None:
        self._call("delete_stream", stream, **kwargs)

    def get_subscription_info(self, group: str, stream: str, **kwargs: Any) -> Any:
        self._call("get_subscription_info", group, stream, **kwargs)
        return self.info

    def get_current_version(self, stream: str, **kwargs: Any) -> Any:
        self._call("get_current_version", stream, **kwargs)
        return self.version

    def read_stream(self, stream: str, **kwargs: Any) -> list[Any]:
        self._call("read_stream", stream, **kwargs)
        if stream not in self.streams:
            raise NotFoundError(stream)
        first = kwargs.get("stream_position") or 0
        return self.streams[stream][first : first + kwargs.get("limit", 10**9)]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[FakeClient]:
    made: list[FakeClient] = []

    def connect(uri: str) -> FakeClient:
        made.append(FakeClient(uri))
        return made[-1]

    monkeypatch.setattr(es, "KurrentDBClient", connect)
    return made


def _driver(**settings: Any) -> es.EventStoreDriver:
    return es.EventStoreDriver(es.Settings(**settings), _endpoints(3), "q")


def _names(client: FakeClient) -> list[str]:
    return [c[0] for c in client.calls]


# --- send ------------------------------------------------------------------------------


def test_a_send_is_one_append_of_the_whole_batch(clients: list[FakeClient]) -> None:
    s = _driver(send_timeout_s=7.0).sender()
    s.send([b"a", b"b", b"c"])
    s.send([b"d"])
    s.send([])  # nothing to append
    (client,) = clients
    assert client.uri.startswith("kurrentdb://10.0.1.10:2113,")
    appends = [c for c in client.calls if c[0] == "append_to_stream"]
    assert [len(c[2]["events"]) for c in appends] == [3, 1]
    (_, args, kwargs) = appends[0]
    assert args == ("q",) and [e.data for e in kwargs["events"]] == [b"a", b"b", b"c"]
    assert kwargs["current_version"] is StreamState.ANY and kwargs["timeout"] == 7.0
    s.close()
    assert client.closed


@pytest.mark.parametrize(
    "error", [GrpcDeadlineExceededError("deadline"), ServiceUnavailableError("gone")]
)
def test_a_failed_append_is_a_driver_error(clients: list[FakeClient], error: Exception) -> None:
    s = _driver().sender()
    clients[0].fail["append_to_stream"] = error
    with pytest.raises(
        DriverError, match=f"append of 2 events to q failed: {type(error).__name__}"
    ):
        s.send([b"a", b"b"])


def test_no_connection_is_a_driver_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def connect(uri: str) -> Any:
        raise DiscoveryFailedError("Failed to obtain cluster info")

    monkeypatch.setattr(es, "KurrentDBClient", connect)
    with pytest.raises(DriverError, match="cannot connect to kurrentdb://.*cluster info"):
        _driver().sender()


# --- receive and ack ------------------------------------------------------------------


def _receiver(clients: list[FakeClient], **settings: Any) -> tuple[Any, FakeSubscription]:
    r = _driver(**settings).receiver()
    return r, clients[-1].subs[-1]


def _arrived(r: Any, n: int) -> None:
    """Until the reader thread has put ``n`` events in the buffer."""
    deadline = time.monotonic() + WAIT_S
    while len(r.held) < n:
        assert time.monotonic() < deadline, f"{len(r.held)} of {n} events arrived"
        time.sleep(0.005)


def test_the_receiver_reads_the_group_with_prefetch_as_its_buffer(
    clients: list[FakeClient],
) -> None:
    r, _sub = _receiver(clients, prefetch=64, ack_batch_max=20, ack_delay_s=0.05)
    (name, args, kwargs) = clients[0].calls[0]
    assert (name, args) == ("read_subscription_to_stream", ("q-workers", "q"))
    assert kwargs == {"event_buffer_size": 64, "max_ack_batch_size": 20, "max_ack_delay": 0.05}
    r.close()


def test_receive_hands_out_at_most_max_in_order_with_redelivered_flags(
    clients: list[FakeClient],
) -> None:
    r, sub = _receiver(clients)
    for n in range(5):
        sub.feed.put(_event(n, retry_count=1 if n == 2 else 0))
    _arrived(r, 5)
    got = r.receive(3, 1)
    assert [d.payload for d in got] == [b"m0", b"m1", b"m2"]
    assert [d.redelivered for d in got] == [False, False, True]
    assert [d.payload for d in r.receive(10, 1)] == [b"m3", b"m4"]
    assert r.receive(10, 0) == []
    r.close()


def test_an_event_arriving_during_receive_is_handed_out(clients: list[FakeClient]) -> None:
    r, sub = _receiver(clients)
    threading.Timer(0.05, lambda: sub.feed.put(_event(7))).start()
    assert [d.payload for d in r.receive(10, WAIT_S)] == [b"m7"]
    r.close()


def test_acks_go_out_in_order_and_only_for_what_was_handed_out_once(
    clients: list[FakeClient],
) -> None:
    r, sub = _receiver(clients)
    for n in range(4):
        sub.feed.put(_event(n))
    _arrived(r, 4)
    first = r.receive(2, 1)
    r.ack(list(reversed(first)))
    assert sub.acked == [uuid.UUID(int=2), uuid.UUID(int=1)]
    held = es.to_delivery(_event(3))  # still in the buffer: never handed out
    with pytest.raises(DriverError, match="2 of 2 deliveries were not handed out"):
        r.ack([held, first[0]])  # still held, and acked already
    again = r.receive(1, 1)
    with pytest.raises(DriverError, match="1 of 2 deliveries"):
        r.ack([again[0], held])
    assert sub.acked == [uuid.UUID(int=2), uuid.UUID(int=1), uuid.UUID(int=3)]
    r.close()


def test_an_event_held_too_long_is_nacked_for_retry_not_handed_out(
    clients: list[FakeClient],
) -> None:
    r, sub = _receiver(clients, message_timeout_s=10.0)
    for n in range(3):
        sub.feed.put(_event(n))
    _arrived(r, 3)
    assert r.held.hold_s == 5.0  # half the message timeout
    with r.cond:  # the first two arrived 6 s ago
        r.held.items = deque((t - 6.0 if i < 2 else t, d) for i, (t, d) in enumerate(r.held.items))
    assert [d.payload for d in r.receive(10, 1)] == [b"m2"]
    assert sub.nacked == [(uuid.UUID(int=1), "retry"), (uuid.UUID(int=2), "retry")]
    r.close()


def test_close_nacks_what_was_never_handed_out_then_stops_the_subscription(
    clients: list[FakeClient],
) -> None:
    r, sub = _receiver(clients)
    for n in range(3):
        sub.feed.put(_event(n))
    _arrived(r, 3)
    r.ack(r.receive(1, 1))
    r.close()
    assert sub.acked == [uuid.UUID(int=1)]
    assert sub.nacked == [(uuid.UUID(int=2), "retry"), (uuid.UUID(int=3), "retry")]
    assert sub.stopped and clients[0].closed
    assert r.reader is not None and not r.reader.is_alive()
    r.close()  # twice is fine


def test_a_subscription_that_fails_is_reported_once_and_read_again(
    clients: list[FakeClient],
) -> None:
    r, sub = _receiver(clients)
    sub.feed.put(_event(0))
    _arrived(r, 1)
    (d,) = r.receive(1, 1)
    sub.feed.put(_event(1))
    _arrived(r, 1)
    sub.feed.put(ServiceUnavailableError("the leader is gone"))
    deadline = time.monotonic() + WAIT_S
    while r.failure is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    with pytest.raises(DriverError, match="cannot reach the server"):
        r.ack([d])  # its event comes again from the server
    assert [x.payload for x in r.receive(1, 1)] == [b"m1"]  # arrived before the failure
    with pytest.raises(DriverError, match="ServiceUnavailableError: the leader is gone"):
        r.receive(1, 1)
    assert len(clients[0].subs) == 2
    deadline = time.monotonic() + WAIT_S
    while not sub.stopped:  # the failed one is stopped apart from the receiver
        assert time.monotonic() < deadline
        time.sleep(0.005)
    new = clients[0].subs[1]
    new.feed.put(_event(0, retry_count=1))
    assert [(x.payload, x.redelivered) for x in r.receive(1, WAIT_S)] == [(b"m0", True)]
    r.close()
    assert new.stopped


def test_a_failed_read_again_is_tried_again_by_the_next_receive(
    clients: list[FakeClient],
) -> None:
    r, sub = _receiver(clients)
    sub.feed.put(ServiceUnavailableError("down"))
    clients[0].fail["read_subscription_to_stream"] = ServiceUnavailableError("still down")
    with pytest.raises(DriverError, match="cannot read group q-workers of q"):
        r.receive(1, WAIT_S)
    del clients[0].fail["read_subscription_to_stream"]
    with pytest.raises(DriverError, match="reading it again"):
        r.receive(1, 1)
    clients[0].subs[-1].feed.put(_event(4))
    assert [x.payload for x in r.receive(1, WAIT_S)] == [b"m4"]
    r.close()


def test_a_receiver_that_cannot_read_the_group_fails_and_closes_its_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[FakeClient] = []

    def connect(uri: str) -> FakeClient:
        made.append(FakeClient(uri))
        made[-1].fail["read_subscription_to_stream"] = NotFoundError("no group")
        return made[-1]

    monkeypatch.setattr(es, "KurrentDBClient", connect)
    with pytest.raises(DriverError, match="NotFoundError: no group"):
        _driver().receiver()
    assert made[0].closed


# --- setup, teardown, remaining, versions -------------------------------------------


def test_setup_creates_the_group_from_the_settings_and_keeps_an_existing_one(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _driver(consumer_strategy="DispatchToSingle", message_timeout_s=12.0, max_retry_count=3)
    d.setup()
    (name, args, kwargs) = clients[0].calls[0]
    assert (name, args) == ("create_subscription_to_stream", ("q-workers", "q"))
    assert kwargs["consumer_strategy"] == "DispatchToSingle"
    assert (kwargs["message_timeout"], kwargs["max_retry_count"]) == (12.0, 3)
    assert kwargs["max_subscriber_count"] == 0  # no limit on receivers
    assert (kwargs["min_checkpoint_count"], kwargs["checkpoint_after"]) == (1, 2.0)
    assert (kwargs["read_batch_size"], kwargs["history_buffer_size"]) == (200, 500)
    assert "from_end" not in kwargs and "stream_position" not in kwargs  # from the start
    assert clients[0].closed

    def exists(uri: str) -> FakeClient:
        c = FakeClient(uri)
        c.fail["create_subscription_to_stream"] = AlreadyExistsError("exists")
        clients.append(c)
        return c

    monkeypatch.setattr(es, "KurrentDBClient", exists)
    d.setup()  # again: nothing changes, no error


def test_setup_and_teardown_errors_are_driver_errors(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _driver()
    real = es.KurrentDBClient

    def failing(uri: str) -> Any:
        c = real(uri)
        c.fail["create_subscription_to_stream"] = GrpcDeadlineExceededError("slow")
        c.fail["delete_stream"] = ServiceUnavailableError("down")
        return c

    monkeypatch.setattr(es, "KurrentDBClient", failing)
    with pytest.raises(DriverError, match="cannot create group q-workers on q: .*slow"):
        d.setup()
    with pytest.raises(DriverError, match="cannot remove q: ServiceUnavailableError"):
        d.teardown()
    assert all(c.closed for c in clients)


def test_teardown_removes_group_and_stream_and_is_quiet_when_gone(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _driver()
    real = es.KurrentDBClient

    def gone(uri: str) -> Any:
        c = real(uri)
        c.fail["delete_subscription"] = NotFoundError("no group")
        c.fail["delete_stream"] = NotFoundError("no stream")
        return c

    d.teardown()
    assert _names(clients[0]) == ["delete_subscription", "delete_stream"]
    assert clients[0].calls[1][2]["current_version"] is StreamState.ANY
    monkeypatch.setattr(es, "KurrentDBClient", gone)
    d.teardown()


def _state(
    clients: list[FakeClient], last: Any, checkpoint: str, parked: int, in_flight: int
) -> Any:
    real = es.KurrentDBClient

    def with_state(uri: str) -> Any:
        c = real(uri)
        c.version = last
        c.info = SimpleNamespace(
            last_checkpointed_event_position=checkpoint,
            parked_message_count=parked,
            total_in_flight_messages=in_flight,
        )
        c.streams["q"] = [_event(n) for n in range(last + 1)] if isinstance(last, int) else []
        c.streams["$persistentsubscription-q::q-workers-parked"] = [
            _event(100 + n) for n in range(parked)
        ]
        return c

    return with_state


def test_remaining_counts_after_the_checkpoint_plus_parked(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _driver()
    monkeypatch.setattr(es, "KurrentDBClient", _state(clients, 9, "4", 2, 3))
    rem = d.remaining()
    assert (rem.count, rem.in_flight, rem.payloads) == (5 + 2, 3, None)
    monkeypatch.setattr(es, "KurrentDBClient", _state(clients, 9, "9", 0, 0))
    assert d.remaining().count == 0  # all acked and checkpointed: drained
    monkeypatch.setattr(es, "KurrentDBClient", _state(clients, StreamState.NO_STREAM, "", 0, 0))
    assert d.remaining().count == 0  # nothing sent yet
    monkeypatch.setattr(es, "KurrentDBClient", _state(clients, 2, "", 0, 1))
    assert d.remaining().count == 3  # nothing checkpointed yet


def test_remaining_identifies_the_events_after_the_checkpoint_and_the_parked_ones(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _driver()
    monkeypatch.setattr(es, "KurrentDBClient", _state(clients, 9, "6", 2, 0))
    rem = d.remaining(identify=True)
    assert rem.count == 5
    assert rem.payloads == [b"m7", b"m8", b"m9", b"m100", b"m101"]
    reads = [c for c in clients[-1].calls if c[0] == "read_stream"]
    assert reads[0][2]["stream_position"] == 7
    assert reads[1][1] == ("$persistentsubscription-q::q-workers-parked",)
    assert reads[1][2]["resolve_links"] is True
    d.identify_cap = 2
    assert d.remaining(identify=True).payloads == [b"m7", b"m8"]
    d.identify_cap = 4
    assert d.remaining(identify=True).payloads == [b"m7", b"m8", b"m9", b"m100"]


def test_remaining_payloads_are_cut_to_the_mqlab_header(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _driver()
    real = es.KurrentDBClient

    def long_events(uri: str) -> Any:
        c = real(uri)
        c.version = 0
        c.info.last_checkpointed_event_position = ""
        c.streams["q"] = [SimpleNamespace(data=bytes(range(100)))]
        return c

    monkeypatch.setattr(es, "KurrentDBClient", long_events)
    rem = d.remaining(identify=True)
    assert rem.payloads == [bytes(range(es.IDENTIFY_PREFIX_BYTES))] and rem.count == 1


def test_remaining_errors_are_driver_errors(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = es.KurrentDBClient

    def no_group(uri: str) -> Any:
        c = real(uri)
        c.fail["get_subscription_info"] = NotFoundError("no such group")
        return c

    monkeypatch.setattr(es, "KurrentDBClient", no_group)
    with pytest.raises(DriverError, match="cannot read the state of group q-workers"):
        _driver().remaining()


def test_redelivery_timeout_is_the_groups_message_timeout() -> None:
    assert _driver(message_timeout_s=12.5).redelivery_timeout_s == 12.5
    assert _driver().redelivery_timeout_s == 30.0


class _Info(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
        body = json.dumps({"esVersion": "24.10.6", "state": "leader"}).encode()
        self.send_response(200 if self.path == "/info" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_server_versions_come_from_each_answering_nodes_info() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Info)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    closed = http.server.HTTPServer(("127.0.0.1", 0), _Info)
    closed_port = closed.server_address[1]
    closed.server_close()  # a node that is down
    try:
        nodes = (
            NodeEndpoint(0, "127.0.0.1", server.server_address[1]),
            NodeEndpoint(1, "127.0.0.1", closed_port),
        )
        d = es.EventStoreDriver(es.Settings(), Endpoints("eventstore", nodes), "q")
        assert d.server_versions() == ["EventStoreDB 24.10.6 (127.0.0.1)"]
    finally:
        server.shutdown()
        server.server_close()
