"""The measured period's start (``measure MS``): a receiver told after it came closes an
interval at once and answers ``measuring`` (mqlab/workload/worker.py ``_measure``), and the
coordinator of a run without warm-up starts the senders only on every receiver's answer
(mqlab/run/workers.py ``wait_measuring``). Before, a receiver that took the command late
(a loaded machine) counted the first receipts in an interval begun before the period,
and a run shorter than a second showed fewer receipts than it had."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

from mqlab.archive import codecs, layout
from mqlab.hosts.base import Attached
from mqlab.run import workers as run_mod
from mqlab.workload import protocol
from mqlab.workload.worker import Worker
from tests.run.test_run_specs import ENDPOINTS, local, scenario, specs


def _worker(tmp_path: Path, role: str) -> tuple[Worker, io.StringIO]:
    s = scenario(1, senders=1, receivers=1, threads=1)
    shape = run_mod.client_processes(s, local())
    [(spec, _, _)] = run_mod.worker_specs(
        s, "run-1", tmp_path, local(), ENDPOINTS, ["q"], role, {}, shape
    )
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    events = io.StringIO()
    return Worker(spec, io.StringIO(), events), events


def _intervals(w: Worker) -> list[tuple[int, int]]:
    w.recorder.close()
    rows, problems = codecs.parse_counts((w.out / layout.COUNTS).read_text())
    assert problems == []
    return [(r.start_ms, r.start_ms + r.length_ms) for r in rows]


def _events(events: io.StringIO) -> list[protocol.Event | None]:
    return [protocol.parse_event(x) for x in events.getvalue().splitlines()]


def test_a_receiver_told_after_the_start_closes_an_interval_then_and_answers(
    tmp_path: Path,
) -> None:
    w, events = _worker(tmp_path, "receiver")
    began = w.recorder.interval_start_ms
    time.sleep(0.02)
    at = began + 5  # the period started 5 ms after the worker's first interval began
    before = int(time.time() * 1000)
    w._measure(at)
    after = int(time.time() * 1000)
    assert _events(events) == [protocol.Measuring(at)]
    [(start, end)] = _intervals(w)
    assert start == began and before <= end <= after  # closed when told, not at 5 ms
    assert w.recorder.interval_start_ms == end >= at


def test_a_future_start_is_left_to_the_ticker_and_answered_at_once(tmp_path: Path) -> None:
    w, events = _worker(tmp_path, "receiver")
    at = int(time.time() * 1000) + 60_000
    w._measure(at)
    assert _events(events) == [protocol.Measuring(at)]
    assert w.measure_ms == at and w.cuts.measure_ms == at
    assert _intervals(w) == []  # nothing closed yet


def test_a_sender_told_late_leaves_the_cut_to_its_ticker(tmp_path: Path) -> None:
    """A sender's interval waits for its threads' watermark (the ticker does that)."""
    w, events = _worker(tmp_path, "sender")
    at = w.recorder.interval_start_ms + 1
    time.sleep(0.01)
    w._measure(at)
    assert _events(events) == [protocol.Measuring(at)]
    assert w.measure_ms == at and _intervals(w) == []


class _Lines(Attached):
    """A worker process as the coordinator sees it: lines it printed, an exit code."""

    def __init__(self) -> None:
        super().__init__()
        self.code: int | None = None

    def say(self, ev: protocol.Event) -> None:
        with self._cv:
            self.lines.append(protocol.event_line(ev))

    def send(self, line: str) -> bool:
        return True

    def close_stdin(self) -> None:
        pass

    def poll(self) -> int | None:
        return self.code

    def kill(self) -> None:
        pass


def _attached(tmp_path: Path, n: int) -> tuple[list[run_mod.Worker], list[_Lines]]:
    s = scenario(1, senders=1, receivers=n, threads=1)
    out, procs = [], []
    for spec in specs(s, local(), tmp_path, "receiver"):
        p = _Lines()
        procs.append(p)
        out.append(run_mod.Worker(spec, local().receivers[0], p, tmp_path, tmp_path))
    return out, procs


def test_the_coordinator_waits_for_every_receivers_answer(tmp_path: Path) -> None:
    ws, procs = _attached(tmp_path, 2)
    procs[0].say(protocol.Measuring(1000))
    procs[1].say(protocol.Measuring(999))  # an older command's answer is not this one's
    timer = threading.Timer(0.3, procs[1].say, (protocol.Measuring(1000),))
    timer.start()
    t0 = time.monotonic()
    assert run_mod.wait_measuring(ws, 1000, bound_s=5.0)
    assert 0.25 < time.monotonic() - t0 < 4.0
    assert [w.measuring for w in ws] == [1000, 1000]


def test_a_receiver_that_never_answers_holds_the_start_only_its_bound(tmp_path: Path) -> None:
    ws, procs = _attached(tmp_path, 2)
    procs[0].say(protocol.Measuring(1000))
    assert not run_mod.wait_measuring(ws, 1000, bound_s=0.2)
    procs[1].code = 3  # one that exited is not waited for
    assert run_mod.wait_measuring(ws, 1000, bound_s=5.0)


def test_the_answer_is_one_json_line() -> None:
    assert json.loads(protocol.event_line(protocol.Measuring(5))) == {
        "event": "measuring",
        "at_ms": 5,
    }
