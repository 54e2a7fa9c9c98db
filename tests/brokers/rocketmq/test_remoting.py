"""RocketMQ's remoting protocol as mqlab's own sender and receiver speak it
(``mqlab/brokers/rocketmq/remoting.py``, ``direct.py``): the bytes of a batch and of
stored messages, built here field by field from RocketMQ's layouts; receipts; answers
matched by opaque; the master looked up again after a failure. The driver on the real
cluster is the contract suite's (``tests/brokers/test_contract.py``, target
``rocketmq``); the last tests here run on it too."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
import uuid
import zlib
from types import SimpleNamespace
from typing import Any

import pytest

from mqlab.brokers.rocketmq import admin, direct, popping, remoting
from mqlab.brokers.rocketmq.driver import RocketmqDriver, Settings
from mqlab.errors import DriverError
from tests.conftest import SharedLab


# -- bytes, built here from RocketMQ's layouts ---------------------------------------------
def stored_message(
    body: bytes,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    reconsume: int = 0,
    props: str = "",
    born_v6: bool = False,
    store_v6: bool = False,
    compressed: bool = False,
    long_topic: bool = False,
) -> bytes:
    """One stored message as a broker returns it to a pop (MessageDecoder.decode's order)."""
    sysflag = (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0) | (0x1 if compressed else 0)
    wire_body = zlib.compress(body) if compressed else body
    t = topic.encode()
    p = props.encode()
    rest = b"".join(
        [
            struct.pack(">i", queue_id),
            struct.pack(">i", 0),  # flag
            struct.pack(">q", offset),
            struct.pack(">q", 123456),  # physical offset
            struct.pack(">i", sysflag),
            struct.pack(">q", 1_700_000_000_000),  # born timestamp
            (b"\0" * 16 if born_v6 else b"\x7f\0\0\x01") + struct.pack(">i", 5555),
            struct.pack(">q", 1_700_000_000_001),  # store timestamp
            (b"\0" * 16 if store_v6 else b"\x7f\0\0\x01") + struct.pack(">i", 10911),
            struct.pack(">i", reconsume),
            struct.pack(">q", 0),  # prepared transaction offset
            struct.pack(">i", len(wire_body)),
            wire_body,
            struct.pack(">h", len(t)) if long_topic else bytes([len(t)]),
            t,
            struct.pack(">h", len(p)),
            p,
        ]
    )
    magic = remoting.MAGIC_V2 if long_topic else remoting.MAGIC_V1
    head = struct.pack(">iii", 12 + len(rest), magic, zlib.crc32(body) & 0x7FFFFFFF)
    return head + rest


def test_a_batch_body_lays_out_each_message_as_the_java_client_does() -> None:
    bodies = [b"first", b"", b"x" * 1000]
    ids = ["A" * 32, "B" * 32, "C" * 32]
    data = remoting.encode_batch(bodies, ids)
    pos = 0
    for body, uid in zip(bodies, ids, strict=True):
        total, magic, crc, flag, blen = struct.unpack_from(">iiiii", data, pos)
        assert (magic, crc, flag, blen) == (0, 0, 0, len(body))
        got = data[pos + 20 : pos + 20 + blen]
        assert got == body
        (plen,) = struct.unpack_from(">h", data, pos + 20 + blen)
        props = data[pos + 22 + blen : pos + 22 + blen + plen].decode()
        assert props == f"UNIQ_KEY\x01{uid}\x02"
        assert total == 22 + blen + plen
        pos += total
    assert pos == len(data)


def test_message_ids_are_unique_within_and_across_producers() -> None:
    a, b = remoting.UniqueIds(), remoting.UniqueIds()
    ids = a.take(1000) + a.take(3) + b.take(1000)
    assert len(set(ids)) == len(ids) == 2003
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_the_send_header_asks_for_a_batch_on_the_chosen_queue() -> None:
    h = remoting.send_header("t1", 5, "group-a")
    assert h["b"] == "t1" and h["e"] == "5" and h["n"] == "group-a"
    assert h["m"] == "true"  # without it the broker stores the body as one message
    assert h["i"] == "WAIT\x01true\x02"
    assert abs(int(h["g"]) - time.time() * 1000) < 5_000
    assert all(isinstance(v, str) for v in h.values())


@pytest.mark.parametrize("born_v6", [False, True])
@pytest.mark.parametrize("store_v6", [False, True])
@pytest.mark.parametrize("long_topic", [False, True])
def test_stored_messages_decode_whatever_their_hosts_and_topic_length(
    born_v6: bool, store_v6: bool, long_topic: bool
) -> None:
    topic = "t" * 200 if long_topic else "orders"
    data = b"".join(
        stored_message(
            f"body-{i}".encode() * (i + 1),
            topic,
            i % 3,
            100 + i,
            reconsume=i % 2,
            born_v6=born_v6,
            store_v6=store_v6,
            long_topic=long_topic,
            props=f"UNIQ_KEY\x01{i:032d}\x02",
        )
        for i in range(5)
    )
    got = popping.decode_messages(data)
    assert [(m.topic, m.queue_id, m.offset, m.reconsume, m.body) for m in got] == [
        (topic, i % 3, 100 + i, i % 2, f"body-{i}".encode() * (i + 1)) for i in range(5)
    ]
    assert all(m.pop_ck is None for m in got)  # reconsumed or not, no POP_CK property


def test_a_compressed_body_is_inflated() -> None:
    data = stored_message(b"z" * 5000, "t", 0, 0, compressed=True)
    assert popping.decode_messages(data)[0].body == b"z" * 5000


@pytest.mark.parametrize("cut", [1, 10, 60])
def test_a_message_cut_short_is_an_error_not_a_wrong_message(cut: int) -> None:
    data = stored_message(b"payload", "t", 0, 0)
    with pytest.raises(DriverError, match="rocketmq: a popped message"):
        popping.decode_messages(data[:-cut])


def test_an_unknown_magic_code_is_an_error() -> None:
    data = bytearray(stored_message(b"payload", "t", 0, 0))
    data[4:8] = struct.pack(">i", 12345)
    with pytest.raises(DriverError, match="magic code 12345"):
        popping.decode_messages(bytes(data))


def answer(ext: dict[str, str], *messages: bytes) -> remoting.Answer:
    return remoting.Answer(0, "FOUND", ext, b"".join(messages))


def test_receipts_name_the_checkpoint_of_their_queue_and_their_own_offset() -> None:
    ext = {
        "popTime": "1000",
        "invisibleTime": "5000",
        "reviveQid": "3",
        "restNum": "0",
        "startOffsetInfo": "0 1 40;0 0 7",
        "msgOffsetInfo": "0 1 40,41;0 0 7,9",
    }
    # delivered out of offset order within queue 0: each gets its own offset
    msgs = [
        stored_message(b"a", "t", 1, 40),
        stored_message(b"b", "t", 0, 9),
        stored_message(b"c", "t", 1, 41),
        stored_message(b"d", "t", 0, 7),
    ]
    got = popping.popped(answer(ext, *msgs), "grp-a", "g")
    assert [(p.body, p.topic, p.queue_id, p.offset, p.receipt, p.redelivered) for p in got] == [
        (b"a", "t", 1, 40, "40 1000 5000 3 0 grp-a 1 40", False),
        (b"b", "t", 0, 9, "7 1000 5000 3 0 grp-a 0 9", False),
        (b"c", "t", 1, 41, "40 1000 5000 3 0 grp-a 1 41", False),
        (b"d", "t", 0, 7, "7 1000 5000 3 0 grp-a 0 7", False),
    ]


def test_a_revived_message_keeps_the_brokers_receipt_and_acks_in_the_retry_topic() -> None:
    ck = "0 2000 5000 4 1 grp-a 0 3"
    ext = {
        "popTime": "2000",
        "invisibleTime": "5000",
        "reviveQid": "4",
        "startOffsetInfo": "1 0 0;0 2 8",
        "msgOffsetInfo": "1 0 3;0 2 8",
    }
    msgs = [
        stored_message(
            b"again", "t", 0, 3, reconsume=1, props=f"UNIQ_KEY\x01{'9' * 32}\x02POP_CK\x01{ck}\x02"
        ),
        stored_message(b"new", "t", 2, 8),
    ]
    again, new = popping.popped(answer(ext, *msgs), "grp-a", "g")
    cp = ("1", 0, 0, 2000, 4, 5000)
    assert again == popping.Popped(b"again", True, "%RETRY%g_t", 0, 3, ck, cp)
    assert new.receipt == "8 2000 5000 4 0 grp-a 2 8" and not new.redelivered


def test_without_checkpoint_fields_each_queues_first_offset_is_the_checkpoint() -> None:
    ext = {"popTime": "1", "invisibleTime": "2", "reviveQid": "0"}
    msgs = [stored_message(b"a", "t", 0, 5), stored_message(b"b", "t", 0, 6)]
    got = popping.popped(answer(ext, *msgs), "b", "g")
    assert [p.receipt for p in got] == ["5 1 2 0 0 b 0 5", "5 1 2 0 0 b 0 6"]


def test_a_pop_answer_without_its_checkpoint_fields_is_an_error() -> None:
    with pytest.raises(DriverError, match="checkpoint fields"):
        popping.popped(answer({"popTime": "1"}), "b", "g")


@pytest.mark.parametrize(
    ("flag", "topic", "want"),
    [
        ("0", "t", "t"),
        ("1", "t", "%RETRY%g_t"),
        ("2", "t", "%RETRY%g+t"),
        ("1", "%RETRY%g_t", "%RETRY%g_t"),
    ],
)
def test_the_ack_topic_follows_the_retry_flag(flag: str, topic: str, want: str) -> None:
    assert popping.ack_topic(flag, topic, "g") == want


# -- a connection against a peer on a socket pair -------------------------------------------
def response(opaque: int, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    h = json.dumps({"code": code, "opaque": opaque, "flag": 1, "extFields": ext or {}}).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body


def requests_of(data: bytes) -> tuple[list[tuple[int, int, dict[str, str], bytes]], int]:
    """The whole request frames at the start of ``data`` (code, opaque, extFields, body),
    and how many bytes they took."""
    out = []
    pos = 0
    while len(data) - pos >= 8:
        n, hl = struct.unpack_from(">ii", data, pos)
        if len(data) - pos < 4 + n:
            break
        h = json.loads(data[pos + 8 : pos + 8 + hl])
        out.append((h["code"], h["opaque"], h["extFields"], data[pos + 8 + hl : pos + 4 + n]))
        pos += 4 + n
    return out, pos


class Peer:
    """A listening socket on loopback that answers as told."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = self.server.getsockname()[:2]
        self.conns: list[socket.socket] = []

    def accept(self) -> socket.socket:
        self.server.settimeout(5)
        c, _ = self.server.accept()
        self.conns.append(c)
        return c

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.server.close()


@pytest.fixture
def peer() -> Any:
    p = Peer()
    yield p
    p.close()


def read_all(c: socket.socket, n_requests: int) -> list[tuple[int, int, dict[str, str], bytes]]:
    """The next ``n_requests`` requests on ``c`` (the test's peer reads them in turn)."""
    data = b""
    c.settimeout(5)
    while True:
        got, used = requests_of(data)
        if len(got) >= n_requests:
            assert len(got) == n_requests and used == len(data), (len(got), n_requests)
            return got
        chunk = c.recv(65536)
        assert chunk, "the connection closed"
        data += chunk


def test_answers_are_matched_to_their_requests_whatever_their_order(peer: Peer) -> None:
    conn = remoting.Connection(peer.address, 5)
    side = peer.accept()
    ops = [conn.next_opaque() for _ in range(3)]
    conn.write(b"".join(remoting.frame(1, {}, op) for op in ops))
    got = read_all(side, 3)
    assert [g[1] for g in got] == ops
    side.sendall(response(ops[2], 0, {"n": "c"}) + response(ops[0], 0, {"n": "a"}))
    side.sendall(response(ops[1], 17, {"n": "b"}))
    assert conn.answer(ops[1], 5).code == 17  # read past the others, kept for their turn
    assert conn.answer(ops[0], 5).ext == {"n": "a"}
    assert conn.answer(ops[2], 5).ext == {"n": "c"}
    conn.close()


def test_an_unanswered_request_and_a_closed_connection_are_errors(peer: Peer) -> None:
    conn = remoting.Connection(peer.address, 5)
    side = peer.accept()
    t0 = time.monotonic()
    with pytest.raises(DriverError, match="did not answer in 0.3 s"):
        conn.call(1, {}, 0.3)
    assert time.monotonic() - t0 < 2
    side.close()
    with pytest.raises(DriverError, match="closed the connection|Connection reset"):
        conn.call(1, {}, 2)


def fake_driver(**settings: Any) -> Any:
    return SimpleNamespace(settings=Settings(**settings), topic="t", group="t-workers")


def test_a_refused_batch_names_the_code_and_the_next_send_looks_the_master_up_again(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups = []

    def master(namesrvs: Any, timeout_s: float) -> Any:
        lookups.append(time.monotonic())
        return "grp-a", peer.address

    monkeypatch.setattr(direct, "find_master", master)
    monkeypatch.setattr(direct, "LOOKUP_EVERY_S", 0.0)
    s = direct.DirectSender(fake_driver(queues=4, send_timeout_s=5.0), [("127.0.0.1", 1)])
    seen: list[Any] = []

    def serve() -> None:
        for code in (14, 0):
            c = peer.accept()
            ((_, op, ext, body),) = read_all(c, 1)
            seen.append((ext, body))
            c.sendall(response(op, code, {}, b""))

    th = threading.Thread(target=serve)
    th.start()
    with pytest.raises(DriverError, match="code 14"):
        s.send([b"a", b"b"])
    s.send([b"c"])
    th.join(5)
    assert len(lookups) == 2  # one per connection: the refusal dropped the first
    (ext1, body1), (ext2, body2) = seen
    assert ext1["n"] == "grp-a" and ext1["b"] == "t" and ext1["m"] == "true"
    assert int(ext2["e"]) == (int(ext1["e"]) + 1) % 4  # queues in turn
    assert b"a" in body1 and b"b" in body1 and b"c" in body2
    s.close()


def test_a_busy_master_keeps_its_connection(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    """SYSTEM_BUSY (flow control: the broker is still the master) fails the batch but
    keeps the connection: the retry goes on it, with no lookup in between."""
    lookups = []
    monkeypatch.setattr(
        direct, "find_master", lambda ns, t: lookups.append(1) or ("grp-a", peer.address)
    )
    s = direct.DirectSender(fake_driver(send_timeout_s=5.0), [("127.0.0.1", 1)])

    def serve() -> None:
        c = peer.accept()
        for code in (remoting.SYSTEM_BUSY, remoting.SUCCESS):
            ((_, op, _, _),) = read_all(c, 1)
            c.sendall(response(op, code))

    th = threading.Thread(target=serve)
    th.start()
    with pytest.raises(DriverError, match="code 2"):
        s.send([b"a"])
    s.send([b"a"])
    th.join(5)
    assert len(lookups) == 1 and len(peer.conns) == 1
    s.close()


def test_no_master_listed_fails_at_once_and_lookups_are_throttled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    monkeypatch.setattr(direct, "find_master", lambda ns, t: calls.append(1))
    s = direct.DirectSender(fake_driver(), [("127.0.0.1", 1)])
    with pytest.raises(DriverError, match="lists a master"):
        s.send([b"x"])
    with pytest.raises(DriverError, match="looked up less than 1 s ago"):
        s.send([b"x"])
    assert len(calls) == 1


def acked_offsets(body: bytes) -> dict[tuple[str, str, int, int], list[int]]:
    """A BATCH_ACK_MESSAGE body read back: (topic, retry flag, queue, pop time) -> the
    offsets its bits name (bit i of the little-endian bytes: offset so + i)."""
    doc = json.loads(body)
    out: dict[tuple[str, str, int, int], list[int]] = {}
    for e in doc["acks"]:
        raw = base64.b64decode(e["b"])
        bits = [i for i in range(len(raw) * 8) if raw[i // 8] >> (i % 8) & 1]
        out.setdefault((e["t"], e["r"], e["q"], e["pt"]), []).extend(e["so"] + i for i in bits)
    return out


def test_the_lanes_headers_and_acks_are_those_of_the_popped_messages() -> None:
    """``popped_headers`` (receivers in lanes) against ``popped``: the same headers in
    order, the same redelivered, the same batch ack, for every kind of stored message
    (hosts, a long topic, compressed, reconsumed, revived with its receipt, the retry
    topic, a body shorter than a header, queues out of order)."""
    hb = 8
    ck = "2 900 5000 4 1 grp-a 0 12"
    ext = {
        "popTime": "1000",
        "invisibleTime": "5000",
        "reviveQid": "3",
        "startOffsetInfo": "0 1 40;0 0 7;1 2 30",
    }
    msgs = [
        stored_message(b"first-of-1" + b"x" * 20, "t", 1, 40),
        stored_message(b"first-of-0" + b"y" * 20, "t", 0, 9, born_v6=True),
        stored_message(b"short", "t", 1, 41),  # shorter than a header
        stored_message(b"long-topic" * 3, "t" * 200, 3, 5, long_topic=True),
        stored_message(b"compressed" * 9, "t", 0, 7, compressed=True),
        stored_message(b"again-once" * 2, "t", 0, 10, reconsume=1, store_v6=True),
        stored_message(b"revived-12" * 2, "t", 0, 12, reconsume=1, props=f"POP_CK\x01{ck}\x02"),
        stored_message(b"from-retry" * 2, "%RETRY%g_t", 2, 31),
        stored_message(b"last-of-1!" * 2, "t", 1, 57),
    ]
    a = answer(ext, *msgs)
    got = popping.popped_headers(a, "g", hb)
    want = popping.popped(a, "grp-a", "g")
    assert got.messages == len(want) == 9
    assert got.short == [2]
    assert got.headers == b"".join(m.body[:hb] for m in want if len(m.body) >= hb)
    assert got.redelivered == [i for i, m in enumerate(want) if m.redelivered] == [5, 6]
    assert got.bits == popping.ack_bits(want)
    body = popping.ack_body("grp-a", "g", "t", got.bits)
    assert body == popping.batch_ack_body("grp-a", "g", "t", want)
    # one stored message at a time, each kind, the same
    for m in msgs:
        one = popping.popped_headers(answer(ext, m), "g", hb)
        assert one.bits == popping.ack_bits(popping.popped(answer(ext, m), "grp-a", "g"))


@pytest.mark.parametrize("cut", [1, 10, 60])
def test_the_lanes_refuse_a_message_cut_short_as_the_decoder_does(cut: int) -> None:
    ext = {"popTime": "1", "invisibleTime": "2", "reviveQid": "0"}
    data = stored_message(b"payload", "t", 0, 0) + stored_message(b"payload", "t", 0, 1)
    with pytest.raises(DriverError, match="rocketmq: a popped message"):
        popping.popped_headers(answer(ext, data[:-cut]), "g", 4)
    with pytest.raises(DriverError, match="rocketmq: a popped message"):
        popping.popped(answer(ext, data[:-cut]), "b", "g")


def test_a_pop_frame_is_the_frame_of_its_header_written_whole() -> None:
    def parsed(frame: bytes) -> tuple[int, dict[str, Any], bytes]:
        total, size = struct.unpack_from(">ii", frame)
        assert total == len(frame) - 4
        return size, json.loads(frame[8 : 8 + size]), frame[8 + size :]

    pops = popping.PopFrames('g"roup', "topic-1", 30_000)
    for n, poll, op in [(32, 500, 7), (1, 1, 2**31 - 1)]:
        size, got, rest = parsed(pops.frame(n, poll, op))
        _, want, _ = parsed(
            remoting.frame(
                remoting.POP_MESSAGE, popping.pop_header('g"roup', "topic-1", n, 30_000, poll), op
            )
        )
        assert rest == b""
        born, want_born = int(got["extFields"].pop("bornTime")), want["extFields"].pop("bornTime")
        assert abs(born - int(want_born)) < 5_000
        assert got == want
        assert got["extFields"]["maxMsgNums"] == str(n) and got["opaque"] == op


def test_a_batch_ack_names_each_checkpoint_and_a_bit_per_message() -> None:
    ext = {
        "popTime": "1000",
        "invisibleTime": "5000",
        "reviveQid": "3",
        "startOffsetInfo": "0 1 40;0 0 7",
    }
    ck = "2 900 5000 4 1 grp-a 0 12"  # a revived message: retry flag 1, checkpoint offset 2
    msgs = [
        stored_message(b"a", "t", 1, 40),
        stored_message(b"b", "t", 0, 9),
        stored_message(b"c", "t", 1, 57),  # 17 past its checkpoint: a third byte
        stored_message(b"d", "t", 0, 7),
        stored_message(b"e", "t", 0, 12, reconsume=1, props=f"POP_CK\x01{ck}\x02"),
    ]
    got = popping.popped(answer(ext, *msgs), "grp-a", "g")
    body = popping.batch_ack_body("grp-a", "g", "t", got)
    doc = json.loads(body)
    assert doc["brokerName"] == "grp-a"
    assert {(e["c"], e["rq"], e["it"]) for e in doc["acks"]} == {("g", 3, 5000), ("g", 4, 5000)}
    # the revived one names the run's topic with retry flag 1, not the retry topic
    assert acked_offsets(body) == {
        ("t", "0", 1, 1000): [40, 57],
        ("t", "0", 0, 1000): [7, 9],
        ("t", "1", 0, 900): [12],
    }


def test_acks_are_written_at_once_answered_later_and_a_refusal_reported_by_the_next_ack(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct, "find_master", lambda ns, t: ("grp-a", peer.address))
    r = direct.DirectReceiver(fake_driver(), [("127.0.0.1", 1)])
    ext = {"popTime": "1", "invisibleTime": "5000", "reviveQid": "0", "startOffsetInfo": "0 0 0"}
    body = b"".join(stored_message(b"m%d" % i, "t", 0, i) for i in range(3))
    seen: list[list[tuple[int, int, dict[str, str], bytes]]] = []

    def serve() -> None:
        c = peer.accept()
        for i, answer_ack in enumerate((None, 1, 0)):  # no ack, then a refusal, then SUCCESS
            reqs = read_all(c, 1 if answer_ack is None else 2)
            seen.append(reqs)
            if answer_ack is None:
                c.sendall(response(reqs[0][1], 0, ext, body))
                continue
            # the pop's answer before the ack's, in one write: either order goes
            popx = {
                "popTime": "2",
                "invisibleTime": "5000",
                "reviveQid": "0",
                "startOffsetInfo": f"0 0 {2 + i}",
            }
            out = response(reqs[1][1], 0, popx, stored_message(b"late%d" % i, "t", 0, 2 + i))
            c.sendall(out + response(reqs[0][1], answer_ack))
        reqs = read_all(c, 1)  # close() writes the last ack and waits for its answer
        seen.append(reqs)
        c.sendall(response(reqs[0][1], 0))

    th = threading.Thread(target=serve)
    th.start()
    ds = r.receive(10, 1.0)
    assert [d.payload for d in ds] == [b"m0", b"m1", b"m2"]
    r.ack(ds[:2])  # written now, its answer read with the next receive's
    with pytest.raises(DriverError, match="not handed out"):
        r.ack([ds[0]])  # acked already: refused, nothing more to write
    late = r.receive(10, 1.0)
    assert [d.payload for d in late] == [b"late1"]
    with pytest.raises(DriverError, match="acks of earlier batches failed.*code 1"):
        r.ack([ds[2]])  # the broker refused the first ack: reported here
    later = r.receive(10, 1.0)
    assert [d.payload for d in later] == [b"late2"]
    r.ack(late + later)
    r.close()
    th.join(5)
    codes = [[code for code, _, _, _ in reqs] for reqs in seen]
    assert codes == [
        [remoting.POP_MESSAGE],
        [remoting.BATCH_ACK_MESSAGE, remoting.POP_MESSAGE],
        [remoting.BATCH_ACK_MESSAGE, remoting.POP_MESSAGE],
        [remoting.BATCH_ACK_MESSAGE],
    ]
    assert acked_offsets(seen[1][0][3]) == {("t", "0", 0, 1): [0, 1]}
    assert acked_offsets(seen[2][0][3]) == {("t", "0", 0, 1): [2]}
    assert acked_offsets(seen[3][0][3]) == {("t", "0", 0, 2): [3, 4]}
    assert not r.failed and not r.written and not r.pending
    assert not r.out


# -- on the real cluster ------------------------------------------------------------------
@pytest.mark.integration
def test_a_batch_is_stored_as_its_messages_and_an_unacked_one_comes_back(
    shared_lab: SharedLab,
) -> None:
    """Straight on the broker: 3 batches in 3 queues are 15 messages, each popped once; 2
    left unacked come again from the retry topic flagged redelivered, their broker-made
    receipts ack them (a batch ack naming the run's topic and retry flag 1), and nothing
    is left."""
    cluster = shared_lab.cluster("rocketmq")
    s = Settings(invisible_duration_s=2)
    d = RocketmqDriver(s, cluster.endpoints(), f"remoting_{uuid.uuid4().hex[:10]}")
    d.setup()
    namesrvs = [(n.host, int(n.extra["namesrv"])) for n in cluster.endpoints().nodes[:1]]
    found = direct.find_master(namesrvs, 5)
    assert found is not None
    name, address = found
    conn = remoting.Connection(address, 5)
    try:
        ids = remoting.UniqueIds()
        for q in range(3):
            body = remoting.encode_batch([b"m-%d-%d" % (q, i) for i in range(5)], ids.take(5))
            a = conn.call(
                remoting.SEND_BATCH_MESSAGE, remoting.send_header(d.topic, q, name), 10, body
            )
            assert a.code == remoting.SUCCESS, a
            assert len(a.ext["msgId"].split(",")) == 5 and a.ext["queueOffset"] == "0"

        def pop_until(n: int, within_s: float) -> list[popping.Popped]:
            """Pops (invisible 2 s, long-polling 1 s) until ``n`` came or time ran out."""
            out: list[popping.Popped] = []
            deadline = time.monotonic() + within_s
            while len(out) < n and time.monotonic() < deadline:
                header = popping.pop_header(d.group, d.topic, 32, 2000, 1000)
                a = conn.call(remoting.POP_MESSAGE, header, 10)
                if a.code == remoting.SUCCESS:
                    out += popping.popped(a, name, d.group)
            return out

        got = pop_until(15, 30)
        assert sorted(p.body for p in got) == sorted(
            b"m-%d-%d" % (q, i) for q in range(3) for i in range(5)
        )
        assert {(p.queue_id, p.offset) for p in got} == {(q, i) for q in range(3) for i in range(5)}
        kept = [p for p in got if p.body in (b"m-0-3", b"m-2-4")]
        ack = popping.batch_ack_body(name, d.group, d.topic, [p for p in got if p not in kept])
        assert conn.call(remoting.BATCH_ACK_MESSAGE, {}, 10, ack).code == remoting.SUCCESS
        again = pop_until(2, 60)
        assert sorted(p.body for p in again) == [b"m-0-3", b"m-2-4"]
        assert all(p.redelivered and p.topic == f"%RETRY%{d.group}_{d.topic}" for p in again)
        ack = popping.batch_ack_body(name, d.group, d.topic, again)
        assert conn.call(remoting.BATCH_ACK_MESSAGE, {}, 10, ack).code == remoting.SUCCESS
        time.sleep(4)  # past the invisible duration: an acked message would be back by now
        a = conn.call(
            remoting.POP_MESSAGE, popping.pop_header(d.group, d.topic, 32, 2000, 1000), 10
        )
        assert a.code in remoting.NOTHING_POPPED, (a.code, a.remark)
        assert admin.consume_stats(address, d.group, d.topic, 5)
    finally:
        conn.close()
        d.teardown()
