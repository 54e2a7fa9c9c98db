"""CPU time per interval: /proc parsing, process-group sums, the broker recorder, and the
cpu.csv codec."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqlab import cpu
from mqlab.archive import codecs


def _stat(
    pid: int, name: str, pgrp: int, utime: int, stime: int, cut: int = 0, cst: int = 0
) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime ...
    fields = ["S", "1", str(pgrp), str(pgrp), "0", "-1", "0", "0", "0", "0", "0"]
    fields += [str(utime), str(stime), str(cut), str(cst), "20", "0", "1", "0", "123"]
    return f"{pid} ({name}) " + " ".join(fields) + "\n"


def fake_proc(root: Path, procs: dict[int, str]) -> Path:
    for pid, text in procs.items():
        (root / str(pid)).mkdir(parents=True, exist_ok=True)
        (root / str(pid) / "stat").write_text(text)
    (root / "self").mkdir(exist_ok=True)  # not a pid: skipped
    return root


def test_parse_stat_reads_group_and_ticks_past_a_name_with_spaces_and_parens() -> None:
    text = _stat(7, "beam.smp (x) y", 40, utime=10, stime=3, cut=5, cst=1)
    assert cpu.parse_stat(text) == (40, 15, 4)
    assert cpu.parse_stat("garbage") is None
    assert cpu.parse_stat("1 (x) S 1") is None


def test_group_cpu_sums_live_processes_and_their_reaped_children(tmp_path: Path) -> None:
    tick_us = 1_000_000 // cpu.CLOCK_TICKS
    proc = fake_proc(
        tmp_path,
        {
            10: _stat(10, "postgres", 10, 100, 50, cut=30, cst=20),
            11: _stat(11, "postgres: backend", 10, 7, 3),
            20: _stat(20, "other", 20, 1000, 1000),
        },
    )
    assert cpu.group_cpu_us([10, 99], proc) == {10: (137 * tick_us, 73 * tick_us)}


def test_group_cpu_of_a_real_busy_process_group_grows() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"],
        start_new_session=True,
    )
    try:
        time.sleep(0.3)
        first = cpu.group_cpu_us([child.pid])[child.pid]
        time.sleep(0.5)
        second = cpu.group_cpu_us([child.pid])[child.pid]
        assert sum(second) - sum(first) >= 100_000  # busy: at least 0.1 s of 0.5 s
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def test_the_recorder_writes_a_row_per_node_and_restarts_count_from_zero(tmp_path: Path) -> None:
    tick_us = 1_000_000 // cpu.CLOCK_TICKS
    proc = tmp_path / "proc"
    groups = {0: 10, 1: 20}
    fake_proc(proc, {10: _stat(10, "a", 10, 100, 0), 20: _stat(20, "b", 20, 50, 50)})
    rec = cpu.GroupRecorder(lambda: dict(groups), tmp_path / "brokers", proc)
    rec._read()  # the baseline (start() does this, then ticks each second)
    start = rec._start_ms
    fake_proc(proc, {10: _stat(10, "a", 10, 130, 10), 20: _stat(20, "b", 20, 40, 50)})
    rec.tick(start + 1000)
    # node 1 restarted: a new group, whose time since it started is all new
    groups[1] = 30
    fake_proc(proc, {30: _stat(30, "b", 30, 5, 5)})
    rec.tick(start + 2000)
    rows0, p0 = codecs.parse_cpu((tmp_path / "brokers/node-00/cpu.csv").read_text())
    rows1, p1 = codecs.parse_cpu((tmp_path / "brokers/node-01/cpu.csv").read_text())
    assert p0 == p1 == []
    assert [(r.start_ms, r.length_ms) for r in rows0] == [(start, 1000), (start + 1000, 1000)]
    assert (rows0[0].user_us, rows0[0].system_us) == (30 * tick_us, 10 * tick_us)
    assert (rows0[1].user_us, rows0[1].system_us) == (0, 0)  # idle in the second interval
    # a group whose total fell (a process left it): 0, never negative
    assert (rows1[0].user_us, rows1[0].system_us) == (0, 0)
    assert (rows1[1].user_us, rows1[1].system_us) == (5 * tick_us, 5 * tick_us)


def test_cpu_csv_round_trips_and_reports_bad_lines() -> None:
    text = codecs.cpu_header() + codecs.cpu_line(1000, 1000, 250_000, 50_000)
    text += "2000,1000,5\n" + "3000,-1,0,0\n" + codecs.cpu_line(4000, 500, 0, 1)
    rows, problems = codecs.parse_cpu(text)
    assert [(r.start_ms, r.cpu_us) for r in rows] == [(1000, 300_000), (4000, 1)]
    assert [line for line, _ in problems] == [3, 4]
    assert codecs.parse_cpu("a,b\n1,2\n") == (
        [],
        [(1, "header is not start_ms,length_ms,user_us,system_us")],
    )


@pytest.mark.parametrize("busy", [False, True])
def test_self_cpu_counts_this_process_s_threads(busy: bool) -> None:
    before = sum(cpu.self_cpu_us())
    t = time.process_time()
    while busy and time.process_time() - t < 0.2:
        pass
    after = sum(cpu.self_cpu_us())
    assert (after - before >= 150_000) is busy
