"""The compiled reader of RocketMQ's pop answers (``mqlab._recvpath.rocketmq_popped``,
mqlab/_rocketmqpop.h) that receivers in lanes use through ``popping.popped_headers``:
what it reads is what the Python path and ``popped`` read, it reads nothing it does not
know (None: the whole answer goes to Python), and its queues' bits are the messages'
offsets from each queue's first."""

from __future__ import annotations

import random

import pytest

from mqlab.brokers import compiled
from mqlab.brokers.rocketmq import popping
from mqlab.errors import DriverError
from tests.brokers.rocketmq.test_remoting import answer, stored_message

pytestmark = pytest.mark.skipif(
    compiled.recv_module is None, reason="not built: tests/brokers/test_sendpath.py fails"
)

HB = 8
EXT = {"popTime": "1000", "invisibleTime": "5000", "reviveQid": "3"}


def read(body: bytes, hb: int = HB) -> tuple[bytes, int, list[int], list[tuple]] | None:
    assert compiled.recv_module is not None
    out: tuple[bytes, int, list[int], list[tuple]] | None = compiled.recv_module.rocketmq_popped(
        body, hb
    )
    return out


def python_path(
    monkeypatch: pytest.MonkeyPatch, a: object, group: str = "g"
) -> popping.PoppedHeaders:
    with monkeypatch.context() as m:
        m.setattr(compiled, "recv_module", None)
        return popping.popped_headers(a, group, HB)  # type: ignore[arg-type]


def plain_pop(rng: random.Random) -> tuple[list[bytes], list[tuple[str, int, int, bytes]]]:
    """A pop of plain messages from a few queues (the retry topic's among them), each
    queue's offsets rising with gaps, bodies of every length around a header's."""
    queues = [("t", q, rng.randrange(0, 10_000)) for q in rng.sample(range(8), 3)]
    queues.append(("%RETRY%g_t", 1, rng.randrange(0, 100)))
    at = {(t, qid): 0 for t, qid, _ in queues}
    starts = {(t, qid): start for t, qid, start in queues}
    messages, wire = [], []
    for _ in range(rng.randrange(1, 40)):
        t, qid, _ = rng.choice(queues)
        offset = starts[(t, qid)] + at[(t, qid)]
        at[(t, qid)] += rng.choice([1, 1, 1, 2, 5])
        body = bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, HB - 1, HB, 40])))
        messages.append((t, qid, offset, body))
        wire.append(stored_message(body, t, qid, offset))
    return wire, messages


@pytest.mark.parametrize("seed", range(40))
def test_plain_pops_read_in_c_as_in_python_and_as_popped(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    wire, messages = plain_pop(rng)
    ext = dict(EXT)
    if seed % 2:  # checkpoints from startOffsetInfo, before each queue's first offset
        firsts: dict[tuple[str, int], int] = {}
        for t, qid, offset, _ in messages:
            firsts.setdefault((t, qid), offset)
        ext["startOffsetInfo"] = ";".join(
            f"{popping.retry_flag(t)} {qid} {max(0, first - rng.randrange(3))}"
            for (t, qid), first in firsts.items()
        )
    a = answer(ext, *wire)
    assert read(a.body) is not None  # it was read in C
    got = popping.popped_headers(a, "g", HB)
    assert got == python_path(monkeypatch, a)
    want = popping.popped(a, "b", "g")
    assert got.messages == len(messages) == len(want)
    assert got.headers == b"".join(body[:HB] for *_, body in messages if len(body) >= HB)
    assert got.short == [i for i, (*_, body) in enumerate(messages) if len(body) < HB]
    assert got.redelivered == []
    assert got.bits == popping.ack_bits(want)


def test_each_queues_bits_are_its_offsets_from_its_first() -> None:
    wire = [
        stored_message(b"a" * 10, "t", 2, 100),
        stored_message(b"b" * 10, "t", 0, 7),
        stored_message(b"c" * 3, "t", 2, 101),
        stored_message(b"d" * 10, "t", 2, 163),  # 63 after its queue's first: the last bit
        stored_message(b"e" * 10, "%RETRY%g_t", 0, 9),
        stored_message(b"f" * 10, "t", 0, 9),
    ]
    assert read(b"".join(wire)) == (
        b"a" * HB + b"b" * HB + b"d" * HB + b"e" * HB + b"f" * HB,
        6,
        [2],
        [
            (b"t", 2, 100, 1 | 2 | 1 << 63),
            (b"t", 0, 7, 1 | 1 << 2),
            (b"%RETRY%g_t", 0, 9, 1),
        ],
    )
    assert read(b"") == (b"", 0, [], [])


@pytest.mark.parametrize(
    "odd",
    [
        stored_message(b"again-once", "t", 0, 1, reconsume=1),
        stored_message(b"born-on-v6", "t", 0, 1, born_v6=True),
        stored_message(b"stored-v6!", "t", 0, 1, store_v6=True),
        stored_message(b"compressed", "t", 0, 1, compressed=True),
        stored_message(b"long-topic", "t" * 200, 0, 1, long_topic=True),
        stored_message(b"before-its-first", "t", 0, -1),  # before the queue's first
        stored_message(b"64-after-its-first", "t", 0, 64),  # past a 64-bit mask
    ],
    ids=["reconsumed", "born-v6", "store-v6", "compressed", "long-topic", "before", "far"],
)
def test_any_other_message_leaves_the_whole_answer_to_python(
    odd: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = [stored_message(b"plain-one", "t", 0, 0), odd, stored_message(b"plain-two", "t", 1, 5)]
    a = answer(EXT, *wire)
    assert read(a.body) is None
    assert read(a.body[: len(wire[0])]) is not None
    if b"before-its-first" in odd:  # the Python path names what is wrong
        with pytest.raises(DriverError, match="before"):
            popping.popped_headers(a, "g", HB)
        return
    assert popping.popped_headers(a, "g", HB) == python_path(monkeypatch, a)


def test_more_queues_than_it_tracks_leave_the_answer_to_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wire = [stored_message(b"queue-body", f"t{q}", q, q) for q in range(65)]
    a = answer(EXT, *wire)
    assert read(a.body) is None
    assert read(b"".join(wire[:64])) is not None
    got = popping.popped_headers(a, "g", HB)
    assert got == python_path(monkeypatch, a) and got.messages == 65


@pytest.mark.parametrize("cut", [1, 10, 60, 99])
def test_a_body_cut_short_is_left_to_python_which_refuses_it(cut: int) -> None:
    data = stored_message(b"payload!", "t", 0, 0) + stored_message(b"payload!", "t", 0, 1)
    assert read(data[:-cut]) is None
    with pytest.raises(DriverError, match="rocketmq: a popped message"):
        popping.popped_headers(answer(EXT, data[:-cut]), "g", 4)


def test_header_bytes_out_of_range_is_refused() -> None:
    for hb in (0, 4097):
        with pytest.raises(ValueError, match="header_bytes"):
            read(b"", hb)
