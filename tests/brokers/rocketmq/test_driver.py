"""The RocketMQ driver's own logic, with no server (none is obtainable here): names,
settings, batching of sends, ack bookkeeping, redelivery flags, error mapping, and the
remoting admin frames. The client library is replaced by scripted stand-ins of the few
objects the driver calls (Producer.send_async, SimpleConsumer.receive/ack/shutdown);
whether a real proxy and broker behave as the module docstring says is verified
nowhere yet (docs/brokers.md)."""

from __future__ import annotations

import json
import socket
import struct
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mqlab.brokers import registry
from mqlab.brokers.base import Delivery, Endpoints, NodeEndpoint
from mqlab.brokers.rocketmq import admin, library
from mqlab.brokers.rocketmq import driver as rm
from mqlab.brokers.rocketmq import producer as rp
from mqlab.errors import DriverError, ScenarioError
from mqlab.typed import build

ROOT = Path(__file__).resolve().parents[3]


def endpoints(n: int = 3, **extra: Any) -> Endpoints:
    nodes = tuple(
        NodeEndpoint(i, f"10.0.1.{10 + i}", 8081, {"broker": 10911, "namesrv": 9876})
        for i in range(n)
    )
    return Endpoints("rocketmq", nodes, extra)


def driver(queue: str = "mqlab_20261123t101010z_42", **settings: Any) -> rm.RocketmqDriver:
    """A driver of the gRPC client (what these tests stand in for); ``client`` may say
    otherwise."""
    return rm.RocketmqDriver(rm.Settings(**{"client": "grpc", **settings}), endpoints(), queue)


# -- names, settings, endpoints ------------------------------------------------------------


@pytest.mark.parametrize("queue", ["mqlab_20261123t101010z_42", "contract_0123abcd", "a-b_C9"])
def test_plain_queue_names_are_the_topic(queue: str) -> None:
    assert rm.topic_name(queue) == queue
    assert rm.group_name(queue) == f"{queue}-workers"


@pytest.mark.parametrize("queue", ["a.b", "a b", "x" * 200, "%RETRY%x", ""])
def test_other_queue_names_become_valid_distinct_topics(queue: str) -> None:
    topic = rm.topic_name(queue)
    assert rm._TOPIC_CHARS.match(topic) and len(topic) <= rm.MAX_TOPIC
    assert rm.topic_name(queue) == topic  # stable
    assert topic != rm.topic_name(queue + "x")


def test_names_that_sanitize_alike_stay_apart() -> None:
    assert rm.topic_name("a.b") != rm.topic_name("a b")


def test_settings_come_from_the_profile_and_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    s = build(rm.Settings, {"queues": 16, "invisible_duration_s": 60}, path)
    assert (s.queues, s.invisible_duration_s, s.long_poll_s) == (16, 60, 5)
    for bad in (
        {"invisible_duration_s": 0},  # a proxy refuses under 1 s (its default: 10 s)
        {"invisible_duration_s": 43_201},  # ... and over 12 h
        {"long_poll_s": 1},  # below the proxy's minimum poll: its deadline check fails
        {"invisible_duration_s": 30.5},  # whole seconds: the client sends seconds only
        {"queues": 0},
        {"partitions": 3},
    ):
        with pytest.raises(ScenarioError):
            build(rm.Settings, bad, path)


def test_the_profile_validates_and_names_its_driver() -> None:
    from mqlab.scenario.load import load_profile

    p = load_profile(ROOT / "scenarios" / "profiles" / "rocketmq-dledger.toml")
    assert p.broker == "rocketmq" and p.settings == rm.Settings()
    assert registry.driver_class("rocketmq") is rm.RocketmqDriver
    assert registry.BROKERS["rocketmq"].local_cluster == "rocketmq"


def test_access_point_and_admin_addresses_come_from_the_endpoints() -> None:
    e = endpoints()
    assert rm.access_point(e) == "10.0.1.10:8081;10.0.1.11:8081;10.0.1.12:8081"
    assert rm.admin_addresses(e, "broker") == [(f"10.0.1.{10 + i}", 10911) for i in range(3)]
    assert rm.admin_addresses(e, "namesrv")[2] == ("10.0.1.12", 9876)
    with pytest.raises(DriverError, match="no node"):
        rm.access_point(Endpoints("rocketmq", ()))
    bare = Endpoints("rocketmq", (NodeEndpoint(0, "h", 8081),))
    with pytest.raises(DriverError, match="node 0 has no broker port"):
        rm.admin_addresses(bare, "broker")


def test_admin_addresses_take_the_hosts_the_launcher_names_once_each() -> None:
    """The local launcher's endpoints: every node through the one proxy on node 0's host,
    each broker and name server on a host of its own (a lab), a name server named by
    several nodes asked once."""
    nodes = tuple(
        NodeEndpoint(
            i,
            "10.0.2.10",
            8081,
            {
                "broker": 10911,
                "broker_host": f"10.0.2.{10 + i}",
                "namesrv": 9876,
                "namesrv_host": "10.0.2.10",
            },
        )
        for i in range(3)
    )
    e = Endpoints("rocketmq", nodes)
    assert rm.admin_addresses(e, "broker") == [(f"10.0.2.{10 + i}", 10911) for i in range(3)]
    assert rm.admin_addresses(e, "namesrv") == [("10.0.2.10", 9876)]


def test_redelivery_timeout_is_the_invisible_duration() -> None:
    assert driver(invisible_duration_s=45).redelivery_timeout_s == 45.0


def test_remaining_is_the_leaders_backlog_of_the_topic_and_its_retry_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ready messages: per queue, end offset less the group's offset, on the group leader
    (broker id 0, as the first name server that answers lists it); in flight unknown."""
    asked: list[tuple[tuple[str, int], str, str]] = []

    def cluster_info(ns: tuple[str, int], _t: float) -> dict[str, dict[int, str]]:
        if ns[0] == "10.0.1.10":
            raise DriverError("down")
        return {"mqlab-broker": {1: "10.0.1.10:10911", 0: "10.0.1.12:10911"}}

    def consume_stats(
        b: tuple[str, int], group: str, topic: str, _t: float
    ) -> dict[int, tuple[int, int]]:
        asked.append((b, group, topic))
        return {0: (10, 4), 1: (3, 3), 2: (0, 0)} if topic == "q1" else {0: (2, 1)}

    monkeypatch.setattr(rm.admin, "cluster_info", cluster_info)
    monkeypatch.setattr(rm.admin, "consume_stats", consume_stats)
    rem = driver("q1").remaining()
    assert (rem.count, rem.in_flight, rem.payloads) == (6 + 1, None, None)
    leader = ("10.0.1.12", 10911)
    assert asked == [(leader, "q1-workers", "q1"), (leader, "q1-workers", "%RETRY%q1-workers_q1")]
    assert rm.RocketmqDriver.identifies_remaining is False
    monkeypatch.setattr(rm.admin, "cluster_info", lambda ns, t: {"g": {1: "h:1"}})
    with pytest.raises(DriverError, match="no broker group has a leader"):
        driver("q1").remaining()


def test_consume_stats_and_cluster_info_bodies_are_read_despite_their_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RocketMQ keys maps by bare integers and by objects, which JSON cannot: read anyway."""
    assert admin.loads(b'{"a":{0:"h:1",1:"h:2"}}') == {"a": {"0": "h:1", "1": "h:2"}}
    body = (
        b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":3,"topic":"t"}:'
        b'{"brokerOffset":9,"consumerOffset":4,"lastTimestamp":0,"pullOffset":7},'
        b'{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":2,"consumerOffset":-1,'
        b'"lastTimestamp":0,"pullOffset":0}}}'
    )
    sent: list[tuple[int, dict[str, str]]] = []

    def call(_a: tuple[str, int], code: int, ext: dict[str, str], _t: float) -> admin.Reply:
        sent.append((code, ext))
        return admin.Reply(0, "", 1, 1, body)

    monkeypatch.setattr(admin, "call", call)
    assert admin.consume_stats(("h", 1), "g", "t", 1.0) == {3: (9, 4), 0: (2, 0)}
    # where the group's pulls got to (a push consumer commits its offset later)
    assert admin.consume_stats(("h", 1), "g", "t", 1.0, pulled=True) == {3: (9, 7), 0: (2, 0)}
    assert admin.consume_stats(("h", 1), "g", "other", 1.0) == {}
    assert sent[0] == (admin.GET_CONSUME_STATS, {"consumerGroup": "g", "topic": "t"})


def test_server_versions_without_a_launcher_name_each_proxy() -> None:
    assert driver().server_versions()[0] == "RocketMQ proxy 10.0.1.10:8081"
    named = rm.RocketmqDriver(rm.Settings(), endpoints(server="RocketMQ 5.3.1"), "q")
    assert named.server_versions() == ["RocketMQ 5.3.1"]


def test_the_client_library_is_not_imported_with_the_driver_module() -> None:
    """Loading a profile or validating a scenario must not import rocketmq (it configures a
    file logger under ~/logs at import)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from mqlab.brokers.rocketmq import driver as rocketmq\n"
        "from mqlab.scenario.load import load_scenario\n"
        "from pathlib import Path\n"
        "load_scenario(Path('scenarios/aws/rocketmq-short-aws.toml'))\n"
        "print('rocketmq' in sys.modules, 'grpc' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"]


# -- the client library's stand-ins --------------------------------------------------------


@dataclass
class Msg:
    """The attributes of rocketmq.Message the driver reads."""

    body: bytes
    message_id: str
    receipt_handle: str = "rh-1"
    delivery_attempt: int | None = 1
    corrupted: bool = False
    topic: str = ""


class Routes:
    """The client's route manager: the topics whose route was looked up."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []
        self.fail = False

    def update_topic_route(self, topic: str) -> None:
        self.looked_up.append(topic)
        if self.fail:
            raise RuntimeError("query topic route exception")


class Producer:
    def __init__(self, outcomes: list[Any]):
        self.outcomes = outcomes  # per message: "ok", an exception, "hang", "raise", "empty"
        self.sent: list[Any] = []
        self.shut = False
        self.route_manager = Routes()
        self.selected: list[tuple[str, Any]] = []

    def send_async(self, message: Any) -> Future:
        outcome = self.outcomes[len(self.sent)]
        if outcome == "raise":
            raise RuntimeError("IllegalStateException: producer is not running now.")
        if outcome == "empty":  # the cached route lists no writable queue
            self.outcomes.pop(len(self.sent))
            raise RuntimeError("no available message queues for selection.")
        self.sent.append(message)
        f: Future = Future()
        if outcome == "ok":
            f.set_result(f"receipt-{len(self.sent)}")
        elif isinstance(outcome, BaseException):
            f.set_exception(outcome)
        return f  # "hang": never resolved

    def update_queue_selector(self, topic: str, route: Any) -> None:
        """The client's hook its route lookups call: the selector follows the route."""
        self.selected.append((topic, route))

    def shutdown(self) -> None:
        self.shut = True


class Consumer:
    def __init__(self, batches: list[Any]):
        self.batches = batches
        self.asked: list[tuple[int, int]] = []
        self.acked: list[str] = []
        self.refuse: set[str] = set()

    def receive(self, max_message_num: int, invisible_duration: int) -> list[Msg]:
        self.asked.append((max_message_num, invisible_duration))
        got = self.batches.pop(0)
        if isinstance(got, BaseException):
            raise got
        return got

    def ack(self, message: Msg) -> None:
        if message.message_id in self.refuse:
            raise RuntimeError("BadRequestException: 40012, receipt handle is expired")
        self.acked.append(message.message_id)

    def shutdown(self) -> None:
        raise RuntimeError("already shut down")  # close must not fail for it


def sender(outcomes: list[Any], **settings: Any) -> tuple[rp.RocketmqSender, Producer]:
    d = driver(**settings)
    d.new_message = lambda payload: {"topic": d.topic, "body": payload}  # type: ignore[method-assign]
    p = Producer(outcomes)
    return rp.RocketmqSender(d, p), p


def receiver(batches: list[Any], **settings: Any) -> tuple[rm.RocketmqReceiver, Consumer]:
    c = Consumer(batches)
    return rm.RocketmqReceiver(driver(**settings), c), c


# -- sends ---------------------------------------------------------------------------------


def test_a_batch_is_sent_whole_and_returns_once_every_message_is_confirmed() -> None:
    s, p = sender(["ok"] * 3)
    s.send([b"a", b"b", b"c"])
    assert [m["body"] for m in p.sent] == [b"a", b"b", b"c"]
    assert {m["topic"] for m in p.sent} == {"mqlab_20261123t101010z_42"}


def test_one_failed_message_fails_the_batch_and_names_the_cause() -> None:
    s, _ = sender(["ok", RuntimeError("ProxyTimeoutException: 40401, master persistence"), "ok"])
    with pytest.raises(DriverError, match=r"1 of 3 messages failed .*ProxyTimeoutException"):
        s.send([b"a", b"b", b"c"])


def test_an_unconfirmed_message_fails_the_batch_after_the_send_timeout() -> None:
    s, _ = sender(["ok", "hang"], send_timeout_s=0.1)
    with pytest.raises(DriverError, match=r"0 of 2 messages failed and 1 were unconfirmed"):
        s.send([b"a", b"b"])


def test_a_send_the_client_refuses_at_once_is_a_driver_error() -> None:
    s, _ = sender(["ok", "raise"])
    with pytest.raises(DriverError, match="not running"):
        s.send([b"a", b"b"])


def test_an_empty_route_is_looked_up_again_and_the_retry_goes_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the group's leader changed, the client's cached route may list no writable
    queue: the send fails (the runner retries it) and the sender asks for the topic's route
    at once, at most once per ROUTE_LOOKUP_EVERY_S; a failed lookup is no new error."""
    now = [1000.0]
    monkeypatch.setattr(rp.time, "monotonic", lambda: now[0])
    s, p = sender(["empty", "empty", "empty", "ok", "ok"])
    with pytest.raises(DriverError, match="no available message queues"):
        s.send([b"a", b"b"])
    assert p.route_manager.looked_up == [s.topic] and s.lookups == 1
    now[0] += rp.ROUTE_LOOKUP_EVERY_S / 2  # again at once: not looked up again so soon
    with pytest.raises(DriverError, match="no available message queues"):
        s.send([b"a", b"b"])
    assert s.lookups == 1
    now[0] += rp.ROUTE_LOOKUP_EVERY_S
    p.route_manager.fail = True
    with pytest.raises(DriverError, match="no available message queues"):
        s.send([b"a", b"b"])
    assert s.lookups == 2 and p.route_manager.looked_up == [s.topic] * 2
    s.send([b"a", b"b"])  # the route lists queues again
    assert [m["body"] for m in p.sent] == [b"a", b"b"]


class BatchingProducer(Producer):
    """A producer of the pinned client 5.1.2 as ``send_batch`` uses it: its private steps
    (each message wrapped, a queue selected, a request built: the client's real protobuf
    request) and its RPC client, whose calls the test answers."""

    def __init__(self, answers: list[Any]):
        super().__init__([])
        self.answers = answers  # per call: a SendMessageResponse, an exception, "hang", "empty"
        self.wrapped: list[Any] = []
        self.calls: list[Any] = []
        self.client_configuration = SimpleNamespace(request_timeout=3)
        self.rpc_client = SimpleNamespace(send_message_async=self._call)

    def _Producer__wrap_sending_message(self, message: Any, transaction: bool) -> None:
        assert transaction is False
        message["id"] = f"id-{len(self.wrapped)}"
        self.wrapped.append(message)

    def _Producer__select_send_queue(self, message: Any) -> Any:
        if self.answers and self.answers[0] == "empty":
            self.answers.pop(0)
            raise RuntimeError("no available message queues for selection.")
        return SimpleNamespace(endpoints="proxy:8081")

    def _Producer__send_req(self, message: Any) -> Any:
        from rocketmq.grpc_protocol.service_pb2 import SendMessageRequest

        req = SendMessageRequest()
        m = req.messages.add()
        m.topic.name, m.body = message["topic"], message["body"]
        m.system_properties.message_id = message["id"]
        return req

    def sign(self) -> list[tuple[str, str]]:
        return [("x-mq-client-id", "test")]

    def _call(self, endpoints: str, req: Any, metadata: Any, timeout: int) -> Future:
        assert (endpoints, metadata, timeout) == ("proxy:8081", self.sign(), 3)
        self.calls.append(req)
        answer = self.answers.pop(0)
        f: Future = Future()
        if isinstance(answer, BaseException):
            f.set_exception(answer)
        elif answer != "hang":
            f.set_result(answer)
        return f


def answer(code: str = "OK", entries: int = 1, entry_code: str | None = None) -> Any:
    from rocketmq.grpc_protocol.definition_pb2 import Code, Status
    from rocketmq.grpc_protocol.service_pb2 import SendMessageResponse, SendResultEntry

    status = Status(code=getattr(Code, code), message=code.lower().replace("_", " "))
    each = Status(code=getattr(Code, entry_code or code), message="entry")
    return SendMessageResponse(
        status=status, entries=[SendResultEntry(status=each) for _ in range(entries)]
    )


def batching_sender(answers: list[Any], **settings: Any) -> tuple[Any, BatchingProducer]:
    d = driver(**settings)
    d.new_message = lambda payload: {"topic": d.topic, "body": payload}  # type: ignore[method-assign]
    p = BatchingProducer(answers)
    return rp.RocketmqSender(d, p), p


def test_a_batch_goes_in_one_call_of_every_message_in_order() -> None:
    s, p = batching_sender([answer(entries=1)])
    s.send([b"a", b"b", b"c"])
    [req] = p.calls
    assert [m.body for m in req.messages] == [b"a", b"b", b"c"]
    assert [m.system_properties.message_id for m in req.messages] == ["id-0", "id-1", "id-2"]
    assert {m.topic.name for m in req.messages} == {s.topic} and p.sent == []


def test_an_answer_per_message_is_checked_each() -> None:
    s, _ = batching_sender([answer(entries=2)])
    s.send([b"a", b"b"])  # one entry per message, all OK
    s, _ = batching_sender([answer(entries=2, entry_code="MASTER_PERSISTENCE_TIMEOUT")])
    with pytest.raises(DriverError, match="master persistence timeout|entry"):
        s.send([b"a", b"b"])
    s, _ = batching_sender([answer(entries=3)])
    with pytest.raises(DriverError, match="3 send results for a batch of 2"):
        s.send([b"a", b"b"])


def test_a_refused_batch_is_a_driver_error_naming_the_brokers_answer() -> None:
    s, _ = batching_sender([answer("MASTER_PERSISTENCE_TIMEOUT")])
    with pytest.raises(DriverError, match=r"batch of 2 failed .*ProxyTimeoutException"):
        s.send([b"a", b"b"])
    s, _ = batching_sender([RuntimeError("StatusCode.UNAVAILABLE")])
    with pytest.raises(DriverError, match="UNAVAILABLE"):
        s.send([b"a"])


def test_an_unanswered_batch_fails_after_the_send_timeout() -> None:
    s, _ = batching_sender(["hang"], send_timeout_s=0.1)
    with pytest.raises(DriverError, match=r"unconfirmed after 0.1 s"):
        s.send([b"a", b"b"])


def test_an_empty_route_in_the_batch_path_is_looked_up_again() -> None:
    s, p = batching_sender(["empty", answer()])
    with pytest.raises(DriverError, match="no available message queues"):
        s.send([b"a", b"b"])
    assert p.route_manager.looked_up == [s.topic] and p.calls == []
    s.send([b"a", b"b"])  # the runner's retry, through the route looked up
    assert len(p.calls) == 1


@dataclass
class Queue:
    """The two properties of a route's MessageQueue the client's producer filters on."""

    writable: bool = True
    master: bool = True

    def is_writable(self) -> bool:
        return self.writable

    def is_master_broker(self) -> bool:
        return self.master


@dataclass
class Route:
    message_queues: list[Queue]


def test_a_route_with_no_writable_queue_leaves_the_producers_queues() -> None:
    """While the group has no master, a route lookup lists no writable queue: the
    producer keeps its queues (the client's retry of a send would otherwise pick from an
    empty list inside a callback and never resolve the message's future); a route listing
    a writable master queue is followed."""
    s, p = sender([])
    no_master = Route([Queue(master=False), Queue(master=False)])
    read_only = Route([Queue(writable=False)])
    back = Route([Queue(), Queue(master=False)])
    for route in (no_master, read_only, back, Route([])):
        p.update_queue_selector(s.topic, route)
    assert p.selected == [(s.topic, back)]
    assert rp.writable(back) and not rp.writable(no_master) and not rp.writable(Route([]))


def test_a_client_without_the_hook_is_left_alone() -> None:
    class Bare:
        pass

    bare = Bare()
    rp.keep_writable_queues(bare)
    assert not hasattr(bare, "update_queue_selector")


def test_other_refusals_look_up_no_route() -> None:
    s, p = sender(["raise"])
    with pytest.raises(DriverError, match="not running"):
        s.send([b"a"])
    assert p.route_manager.looked_up == []


def test_close_shuts_the_producer_down() -> None:
    s, p = sender([])
    s.close()
    assert p.shut


# -- receives, acks, redelivery -------------------------------------------------------------


def test_receive_asks_for_at_most_32_with_the_invisible_duration() -> None:
    r, c = receiver([[], [], []], invisible_duration_s=45)
    assert r.receive(10, 0.5) == []
    r.receive(100, 0.5)
    r.receive(0, 0.5)
    assert c.asked == [(10, 45), (32, 45), (1, 45)]


def test_deliveries_carry_body_and_message_and_flag_later_attempts() -> None:
    first, again = Msg(b"x", "m1"), Msg(b"y", "m2", "rh-9", delivery_attempt=3)
    unknown = Msg(b"z", "m3", delivery_attempt=None)  # no attempt count: the first
    r, _ = receiver([[first, again, unknown]])
    got = r.receive(10, 0.5)
    assert [(d.payload, d.handle, d.redelivered) for d in got] == [
        (b"x", first, False),
        (b"y", again, True),
        (b"z", unknown, False),
    ]


def test_a_corrupted_message_is_not_handed_out() -> None:
    r, _ = receiver([[Msg(b"x", "m1", corrupted=True), Msg(b"y", "m2")]])
    assert [d.payload for d in r.receive(10, 0.5)] == [b"y"]


def test_a_failed_receive_is_a_driver_error() -> None:
    r, _ = receiver([RuntimeError("NotFoundException: 40402, topic not found")])
    with pytest.raises(DriverError, match="receive failed: RuntimeError: NotFoundException"):
        r.receive(10, 0.5)


def test_acks_go_one_by_one_in_order_and_only_once() -> None:
    r, c = receiver([[Msg(b"a", "m1"), Msg(b"b", "m2"), Msg(b"c", "m3")]])
    got = r.receive(10, 0.5)
    r.ack(list(reversed(got)))
    assert c.acked == ["m3", "m2", "m1"]
    with pytest.raises(DriverError, match="3 of 3 deliveries were not handed out"):
        r.ack(got)  # acked already
    assert c.acked == ["m3", "m2", "m1"] and not r.out


def test_a_delivery_not_handed_out_is_refused_after_acking_the_others() -> None:
    r, c = receiver([[Msg(b"a", "m1")]])
    got = r.receive(10, 0.5)
    stranger = Delivery(b"s", Msg(b"s", "m9"), False)
    with pytest.raises(DriverError, match="1 of 2 deliveries were not handed out"):
        r.ack([stranger, *got])
    assert c.acked == ["m1"]


def test_each_delivery_of_a_message_is_acked_by_its_own_receipt_handle() -> None:
    """A message delivered twice (its invisible duration ran out) has two handles: each
    delivery handed out may be acked once."""
    one, two = Msg(b"a", "m1", "rh-1"), Msg(b"a", "m1", "rh-2", delivery_attempt=2)
    r, c = receiver([[one], [two]])
    d1, d2 = r.receive(10, 0.5) + r.receive(10, 0.5)
    r.ack([d2, d1])
    assert c.acked == ["m1", "m1"]
    with pytest.raises(DriverError):
        r.ack([d1])


def test_a_refused_ack_is_reported_after_the_others_and_may_be_tried_again() -> None:
    r, c = receiver([[Msg(b"a", "m1"), Msg(b"b", "m2"), Msg(b"c", "m3")]])
    got = r.receive(10, 0.5)
    c.refuse = {"m2"}
    with pytest.raises(DriverError, match=r"1 of 3 acks failed .*receipt handle is expired"):
        r.ack(got)
    assert c.acked == ["m1", "m3"]
    c.refuse = set()
    r.ack([got[1]])  # still handed out and unacked: a retry may go through
    assert c.acked == ["m1", "m3", "m2"] and not r.out


class PipelinedConsumer(Consumer):
    """A client whose ack call can be started (``Consumer.__ack``): the calls are answered
    only once ``answer_after`` were started, in reverse order, ``refuse`` ids with the
    status of an expired receipt handle."""

    def __init__(self, batches: list[Any], answer_after: int):
        super().__init__(batches)
        self.answer_after = answer_after
        self.calls: list[tuple[Msg, Future[Any]]] = []

    def _Consumer__ack(self, message: Msg) -> Future[Any]:
        from rocketmq.grpc_protocol import Code
        from rocketmq.grpc_protocol.service_pb2 import AckMessageResponse

        f: Future[Any] = Future()
        self.calls.append((message, f))
        if len(self.calls) == self.answer_after:
            for m, call in reversed(self.calls):
                answer = AckMessageResponse()
                if m.message_id in self.refuse:
                    answer.status.code = Code.INVALID_RECEIPT_HANDLE
                    answer.status.message = "receipt handle is expired"
                else:
                    self.acked.append(m.message_id)
                    answer.status.code = Code.OK
                call.set_result(answer)
        return f


def test_the_acks_of_a_batch_are_all_started_before_any_is_waited_for() -> None:
    """A batch's acks cost one round trip, not one each: the broker here answers only once
    all three calls were started (acked one at a time, the first would wait in vain)."""
    msgs = [Msg(b"a", "m1"), Msg(b"b", "m2"), Msg(b"c", "m3")]
    c = PipelinedConsumer([msgs], answer_after=3)
    c.refuse = {"m2"}
    r = rm.RocketmqReceiver(driver(request_timeout_s=1), c)
    got = r.receive(10, 0.5)
    with pytest.raises(DriverError, match=r"1 of 3 acks failed .*receipt handle is expired"):
        r.ack(got)
    assert [m.message_id for m, _ in c.calls] == ["m1", "m2", "m3"]
    assert c.acked == ["m3", "m1"]
    assert dict(r.out) == {("m2", "rh-1"): 1}  # refused: still handed out, may be retried


class BatchAckConsumer(Consumer):
    """A consumer of the pinned client 5.1.2 as ``start_acks`` uses it: its own request
    step (``Consumer.__ack_req``: the client's real AckMessageRequest of one entry) and its
    RPC client, which answers each call as the proxy does, an entry per ack (``refuse``
    ids: an expired receipt handle; ``fail``: the call itself fails)."""

    def __init__(self, batches: list[Any]):
        super().__init__(batches)
        self.calls: list[tuple[Any, Any]] = []
        self.fail: BaseException | None = None
        self.client_configuration = SimpleNamespace(request_timeout=3)
        self.rpc_client = SimpleNamespace(ack_message_async=self._call)

    def _Consumer__ack_req(self, message: Msg) -> Any:
        from rocketmq.grpc_protocol.service_pb2 import AckMessageEntry, AckMessageRequest

        req = AckMessageRequest()
        req.group.name, req.topic.name = "g", message.topic
        req.entries.append(
            AckMessageEntry(message_id=message.message_id, receipt_handle=message.receipt_handle)
        )
        return req

    def sign(self) -> list[tuple[str, str]]:
        return [("x-mq-client-id", "test")]

    def _call(self, endpoints: Any, req: Any, metadata: Any, timeout: int) -> Future[Any]:
        from rocketmq.grpc_protocol import Code
        from rocketmq.grpc_protocol.service_pb2 import AckMessageResponse

        assert (metadata, timeout) == (self.sign(), 3)
        self.calls.append((endpoints, req))
        f: Future[Any] = Future()
        if self.fail is not None:
            f.set_exception(self.fail)
            return f
        answer = AckMessageResponse()
        for e in req.entries:
            entry = answer.entries.add(message_id=e.message_id, receipt_handle=e.receipt_handle)
            if e.message_id in self.refuse:
                entry.status.code = Code.INVALID_RECEIPT_HANDLE
                entry.status.message = "receipt handle is expired"
            else:
                self.acked.append(e.message_id)
                entry.status.code = Code.OK
        refused = any(e.message_id in self.refuse for e in req.entries)
        answer.status.code = Code.MULTIPLE_RESULTS if refused else Code.OK
        f.set_result(answer)
        return f


def batch_msgs(endpoints: str = "proxy:8081") -> list[Any]:
    out = []
    for i in (1, 2, 3):
        m = Msg(bytes([96 + i]), f"m{i}", f"rh-{i}", topic="t")
        m.endpoints = endpoints  # type: ignore[attr-defined]
        out.append(m)
    return out


def test_the_acks_of_a_batch_go_in_one_call() -> None:
    c = BatchAckConsumer([batch_msgs()])
    r = rm.RocketmqReceiver(driver(), c)
    r.ack(r.receive(10, 0.5))
    [(endpoints, req)] = c.calls
    assert endpoints == "proxy:8081" and req.topic.name == "t"
    assert [(e.message_id, e.receipt_handle) for e in req.entries] == [
        ("m1", "rh-1"),
        ("m2", "rh-2"),
        ("m3", "rh-3"),
    ]
    assert c.acked == ["m1", "m2", "m3"] and not r.out


def test_an_ack_the_answer_refuses_stays_handed_out_and_the_others_are_acked() -> None:
    c = BatchAckConsumer([batch_msgs()])
    c.refuse = {"m2"}
    r = rm.RocketmqReceiver(driver(), c)
    got = r.receive(10, 0.5)
    with pytest.raises(DriverError, match=r"1 of 3 acks failed .*receipt handle is expired"):
        r.ack(got)
    assert c.acked == ["m1", "m3"] and dict(r.out) == {("m2", "rh-2"): 1}
    with pytest.raises(DriverError, match="2 of 2 deliveries were not handed out"):
        r.ack([got[0], got[2]])  # acked already: refused, no call
    assert len(c.calls) == 1
    c.refuse = set()
    r.ack([got[1]])  # a retry goes through
    assert c.acked == ["m1", "m3", "m2"] and not r.out


def test_a_failed_ack_call_leaves_every_delivery_handed_out() -> None:
    c = BatchAckConsumer([batch_msgs()])
    c.fail = RuntimeError("StatusCode.UNAVAILABLE: proxy gone")
    r = rm.RocketmqReceiver(driver(), c)
    got = r.receive(10, 0.5)
    with pytest.raises(DriverError, match=r"3 of 3 acks failed .*UNAVAILABLE"):
        r.ack(got)
    assert sum(r.out.values()) == 3
    c.fail = None
    r.ack(got)
    assert c.acked == ["m1", "m2", "m3"] and not r.out


def test_messages_from_two_proxies_are_acked_by_a_call_to_each() -> None:
    msgs = batch_msgs("proxy-a")[:2] + batch_msgs("proxy-b")[2:]
    c = BatchAckConsumer([msgs])
    r = rm.RocketmqReceiver(driver(), c)
    r.ack(r.receive(10, 0.5))
    assert [(ep, [e.message_id for e in req.entries]) for ep, req in c.calls] == [
        ("proxy-a", ["m1", "m2"]),
        ("proxy-b", ["m3"]),
    ]


def test_close_tolerates_a_consumer_that_fails_to_shut_down() -> None:
    r, _ = receiver([])
    r.close()


def test_the_client_is_started_and_a_failed_start_is_a_driver_error() -> None:
    class Failing:
        def startup(self) -> None:
            raise RuntimeError("update topic route raise exception")

    d = driver()
    d.new_producer = Failing  # type: ignore[method-assign,assignment]
    with pytest.raises(DriverError, match="cannot start a producer on 10.0.1.10:8081;"):
        d.sender()


def test_describe_keeps_the_first_line_of_a_client_error() -> None:
    assert rm.describe(RuntimeError("a\nb")) == "RuntimeError: a"
    assert rm.describe(TimeoutError()) == "TimeoutError"


# -- the remoting admin ----------------------------------------------------------------------


def test_a_request_frame_is_length_header_length_json_header() -> None:
    frame = admin.encode(17, {"topic": "t"}, 7)
    total, mark = struct.unpack(">ii", frame[:8])
    assert total == len(frame) - 4 and mark >> 24 == 0 and mark & 0xFFFFFF == len(frame) - 8
    header = json.loads(frame[8:])
    assert header["code"] == 17 and header["opaque"] == 7 and header["flag"] == 0
    assert header["extFields"] == {"topic": "t"} and header["language"] == "PYTHON"


def test_a_response_frame_is_decoded_with_its_body() -> None:
    head = json.dumps({"code": 17, "remark": "No topic route info", "opaque": 3, "flag": 1})
    raw = struct.pack(">i", len(head)) + head.encode() + b"BODY"
    reply = admin.decode(raw)
    assert (reply.code, reply.remark, reply.opaque, reply.flag) == (17, "No topic route info", 3, 1)
    assert reply.body == b"BODY"
    with pytest.raises(DriverError, match="not JSON"):
        admin.decode(struct.pack(">i", (1 << 24) | 2) + b"{}")
    with pytest.raises(DriverError, match="header of 99 bytes"):
        admin.decode(struct.pack(">i", 99) + b"{}")


def test_the_create_topic_header_has_every_required_field() -> None:
    ext = admin.create_topic_request("t1", 8)
    assert ext == {
        "topic": "t1",
        "defaultTopic": "TBW102",
        "readQueueNums": "8",
        "writeQueueNums": "8",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
        "attributes": "+message.type=NORMAL",
    }


def _answer(sock: socket.socket, replies: list[tuple[int, str]], seen: list[dict]) -> None:
    """The far end of a socket pair: read each request, answer it as a broker would."""
    for code, remark in replies:
        (length,) = struct.unpack(">i", admin._read_exactly(sock, 4))
        frame = admin._read_exactly(sock, length)
        header = json.loads(frame[4 : 4 + (struct.unpack(">i", frame[:4])[0] & 0xFFFFFF)])
        seen.append(header)
        out = json.dumps({"code": code, "remark": remark, "opaque": header["opaque"], "flag": 1})
        sock.sendall(struct.pack(">ii", 4 + len(out), len(out)) + out.encode())


def test_exchange_sends_a_request_and_matches_its_response() -> None:
    near, far = socket.socketpair()
    seen: list[dict] = []
    t = threading.Thread(target=_answer, args=(far, [(0, ""), (17, "no route")], seen))
    t.start()
    with near, far:
        ok = admin.exchange(near, admin.UPDATE_AND_CREATE_TOPIC, {"topic": "t"})
        missing = admin.exchange(near, admin.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
        t.join()
    assert ok.code == admin.SUCCESS and (missing.code, missing.remark) == (17, "no route")
    assert [h["code"] for h in seen] == [17, 105]


def test_a_response_to_another_request_is_an_error() -> None:
    near, far = socket.socketpair()

    def wrong() -> None:
        admin._read_exactly(far, 4 + struct.unpack(">i", admin._read_exactly(far, 4))[0] - 4)
        out = json.dumps({"code": 0, "opaque": -5, "flag": 1}).encode()
        far.sendall(struct.pack(">ii", 4 + len(out), len(out)) + out)

    t = threading.Thread(target=wrong)
    t.start()
    with near, far, pytest.raises(DriverError, match="opaque -5"):
        admin.exchange(near, admin.UPDATE_AND_CREATE_TOPIC, {})
    t.join()


class Admin:
    """Stands in for rocketmq_admin's calls: records them, fails for chosen hosts; the
    group's master is ``master``; a broker in ``drops`` loses the topic once (a
    follower's sync from a master that lacked it)."""

    def __init__(
        self,
        down: set[str] = frozenset(),  # type: ignore[assignment]
        routed_after: int = 0,
        master: str | None = None,
        drops: set[str] = frozenset(),  # type: ignore[assignment]
    ):
        self.down, self.routed_after, self.master = down, routed_after, master
        self.drops = set(drops)
        self.held: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    def master_address(self, _namesrvs: list, _t: float) -> str | None:
        return None if self.master is None else f"{self.master}:10911"

    def has_topic(self, a: tuple[str, int], _topic: str, _t: float) -> bool:
        self._call("has?", a)
        if a[0] in self.drops:
            self.drops.discard(a[0])
            self.held.discard(a[0])
        return a[0] in self.held

    def _call(self, what: str, address: tuple[str, int]) -> None:
        self.calls.append((what, address[0]))
        if address[0] in self.down:
            raise DriverError(f"rocketmq admin: {address[0]}:{address[1]}: refused")

    def create_topic(self, a: tuple[str, int], topic: str, queues: int, _t: float) -> None:
        self._call(f"create {topic} {queues}", a)
        self.held.add(a[0])

    def topic_routed(self, a: tuple[str, int], _topic: str, _t: float) -> bool:
        self._call("routed?", a)
        return sum(c[0] == "routed?" for c in self.calls) > self.routed_after

    def delete_topic(self, a: tuple[str, int], topic: str, _t: float) -> None:
        self._call(f"delete {topic}", a)

    def delete_route(self, a: tuple[str, int], topic: str, _t: float) -> None:
        self._call(f"unroute {topic}", a)


def test_setup_creates_the_topic_on_every_broker_and_waits_for_its_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = Admin(down={"10.0.1.11"}, routed_after=4, master="10.0.1.12", drops={"10.0.1.10"})
    for name in ADMIN_CALLS:
        monkeypatch.setattr(rm.admin, name, getattr(fake, name))
    monkeypatch.setattr(rm, "ROUTE_POLL_S", 0.0)
    d = driver("q1", queues=4)
    d.setup()
    creates = [c[1] for c in fake.calls if c[0] == "create q1 4"]
    # the master first; then the follower that lost it (its sync) is asked again
    assert creates == ["10.0.1.12", "10.0.1.10", "10.0.1.11", "10.0.1.10"]
    # name servers asked in turn (the one on the node that is down fails) until one routes it
    asked = [c[1] for c in fake.calls if c[0] == "routed?"]
    assert asked == [f"10.0.1.{10 + i % 3}" for i in range(6)]
    # every broker asked whether it holds it (the one down only logged) until all that
    # answer do
    held = [c[1] for c in fake.calls if c[0] == "has?"]
    assert held == [f"10.0.1.{10 + i % 3}" for i in range(6)]
    assert fake.held == {"10.0.1.10", "10.0.1.12"}
    fake.calls.clear()
    d.teardown()  # a node down is only logged
    assert [c[0] for c in fake.calls] == ["delete q1"] * 3 + ["unroute q1"] * 3


ADMIN_CALLS = (
    "create_topic",
    "topic_routed",
    "delete_topic",
    "delete_route",
    "has_topic",
    "master_address",
)


def test_setup_creates_in_node_order_without_a_master_and_fails_on_a_broker_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No master listed (an election): node order. A broker that answers but never holds
    the topic fails the setup, naming it."""
    fake = Admin()
    for name in ADMIN_CALLS:
        monkeypatch.setattr(rm.admin, name, getattr(fake, name))
    monkeypatch.setattr(rm, "ROUTE_POLL_S", 0.0)
    driver("q1").setup()
    assert [c[1] for c in fake.calls if c[0].startswith("create")] == [
        f"10.0.1.{10 + i}" for i in range(3)
    ]
    monkeypatch.setattr(rm.admin, "has_topic", lambda a, _t, _s: a[0] != "10.0.1.11")
    with pytest.raises(DriverError, match=r"broker 10\.0\.1\.11:\d+ still lacks topic q1 0.1 s"):
        driver("q1", admin_timeout_s=0.1).setup()


def test_setup_fails_when_no_broker_creates_the_topic_or_no_name_server_routes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nobody = Admin(down={f"10.0.1.{10 + i}" for i in range(3)})
    monkeypatch.setattr(rm.admin, "create_topic", nobody.create_topic)
    monkeypatch.setattr(rm.admin, "master_address", nobody.master_address)
    with pytest.raises(DriverError, match="no broker created topic q1"):
        driver("q1").setup()
    never = Admin(routed_after=10**9)
    monkeypatch.setattr(rm.admin, "create_topic", never.create_topic)
    monkeypatch.setattr(rm.admin, "topic_routed", never.topic_routed)
    monkeypatch.setattr(rm, "ROUTE_POLL_S", 0.0)
    with pytest.raises(DriverError, match="no name server routes topic q1 0.1 s after"):
        driver("q1", admin_timeout_s=0.1).setup()


# -- the glue to the real client library (constructed, never started: no server) -----------


def test_the_client_library_is_built_with_the_driver_settings() -> None:
    import logging

    rmq = rm.client()
    lg = logging.getLogger(library.CLIENT_LOGGER)
    assert not lg.handlers and lg.propagate and lg.level == logging.WARNING
    d = driver("q1", request_timeout_s=4, long_poll_s=7)
    m = d.new_message(b"payload")
    assert isinstance(m, rmq.Message) and (m.topic, m.body) == ("q1", b"payload")
    conf = d.configuration()
    assert conf.request_timeout == 4
    assert [(a.host, a.port) for a in conf.rpc_endpoints.endpoints.addresses] == [
        (f"10.0.1.{10 + i}", 8081) for i in range(3)
    ]
    c = d.new_consumer()
    assert isinstance(c, rmq.SimpleConsumer)
    assert (c.consumer_group, c.await_duration) == ("q1-workers", 7)
    p = d.new_producer()
    assert isinstance(p, rmq.Producer) and p.topics == {"q1"}
    assert not c.is_running and not p.is_running


def test_an_empty_route_starts_a_consumer_again_and_acks_go_on() -> None:
    """After the group's leader changed, the client's cached route lists no queue: the
    receive fails (the worker counts it) and the next one goes through a new consumer of
    the same group, at most one new consumer per RENEW_EVERY_S; an earlier delivery is
    still acked by its handle."""
    empty = RuntimeError("IllegalArgumentException: no available message queues for selection.")
    r, old = receiver([[Msg(b"a", "m-1")], empty, empty])
    fresh = Consumer([[Msg(b"b", "m-2")]])
    started: list[str] = []

    def started_consumer(make: Any, what: str) -> Consumer:
        started.append(what)
        return fresh

    r.driver._started = started_consumer  # type: ignore[method-assign]
    [first] = r.receive(10, 1.0)
    with pytest.raises(DriverError, match="no available message queues"):
        r.receive(10, 1.0)
    assert started == ["simple consumer"] and r.consumer is fresh and r.renewals == 1
    r.consumer = old  # the old one again: a second empty route within RENEW_EVERY_S
    with pytest.raises(DriverError):
        r.receive(10, 1.0)
    assert started == ["simple consumer"]  # not renewed again so soon
    r.consumer = fresh
    [second] = r.receive(10, 1.0)
    r.ack([first, second])
    assert fresh.acked == ["m-1", "m-2"]
