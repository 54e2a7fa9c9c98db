"""What the broker still held after the receivers stopped (mqlab/run/drain.py
``_check_undrained``), over one queue or several: the sum, each queue's own figures, and
a queue the broker did not answer for. The drivers here are stand-ins that answer
``remaining()`` with set figures; expected values are written out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mqlab import envelope
from mqlab.archive import records
from mqlab.brokers.base import Remaining
from mqlab.run import drain


class Answers:
    """A driver as far as ``_check_undrained`` asks it: its queue and ``remaining()``."""

    identifies_remaining = True

    def __init__(self, queue: str, answer: Remaining | Exception):
        self.queue = queue
        self.answer = answer

    def remaining(self, identify: bool = False) -> Remaining:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def headers(sender: int, seqs: list[int]) -> list[bytes]:
    pool = envelope.PayloadPool(envelope.HEADER_BYTES, seed=1)
    return [envelope.encode_batch(sender, seq, 1, 0, pool)[0] for seq in seqs]


def check(tmp_path: Path, drivers: list[Any]) -> records.UndrainedRecord:
    drain.check_undrained(drivers, tmp_path, retry_s=0)
    return records.read_undrained(tmp_path / "undrained.json")


def test_one_queue_writes_the_record_runs_always_wrote(tmp_path: Path) -> None:
    rec = check(tmp_path, [Answers("q", Remaining(2, headers(4, [7, 9]), in_flight=1))])
    assert (rec.count, rec.in_flight, rec.identified, rec.error) == (2, 1, True, None)
    assert {k: sorted(v) for k, v in rec.senders.items()} == {4: [7, 9]}
    assert rec.queues == {}


def test_several_queues_sum_and_keep_each_queues_figures(tmp_path: Path) -> None:
    rec = check(
        tmp_path,
        [
            Answers("q_q00", Remaining(0, [], in_flight=0)),
            Answers("q_q01", Remaining(2, headers(1, [3, 4]), in_flight=2)),
            Answers("q_q02", Remaining(1, headers(2, [0]), in_flight=0)),
        ],
    )
    assert (rec.count, rec.in_flight, rec.identified, rec.error) == (3, 2, True, None)
    assert {k: sorted(v) for k, v in rec.senders.items()} == {1: [3, 4], 2: [0]}
    assert rec.queues == {
        "q_q00": {"count": 0, "in_flight": 0},
        "q_q01": {"count": 2, "in_flight": 2},
        "q_q02": {"count": 1, "in_flight": 0},
    }


def test_a_queue_without_payloads_or_in_flight_makes_the_sum_count_only(
    tmp_path: Path,
) -> None:
    rec = check(
        tmp_path,
        [Answers("a", Remaining(1, headers(0, [5]), in_flight=0)), Answers("b", Remaining(2))],
    )
    assert (rec.count, rec.in_flight, rec.identified, rec.senders) == (3, None, False, {})


def test_a_queue_the_broker_did_not_answer_for_makes_the_sum_unknown(tmp_path: Path) -> None:
    rec = check(
        tmp_path,
        [Answers("a", Remaining(0, [], 0)), Answers("b", ConnectionError("node down"))],
    )
    assert rec.count is None and rec.error == "b: ConnectionError: node down"
    assert rec.queues["a"] == {"count": 0, "in_flight": 0}
    assert rec.queues["b"] == {"count": None, "error": "ConnectionError: node down"}
    one = check(tmp_path, [Answers("a", ConnectionError("node down"))])
    assert one.count is None and one.error == "ConnectionError: node down" and one.queues == {}
