"""A run whose client nodes each spread their threads over several worker processes
(``processes_per_node``), end to end on the local Redis cluster: a folder per process,
sender ids unique across every thread of every node, the node's threads in all (not
processes x threads), and the summary's delivery and throughput figures as computed
here, independently, from the workers' own records; and a fixed-rate scenario that
offers the load its file states whatever this machine's cores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyroaring import BitMap64

from mqlab.analysis.catalog import read_run_table
from mqlab.archive import codecs, records
from mqlab.archive.formats import read_json
from tests.analysis.test_concurrency import littles_law
from tests.conftest import SharedLab
from tests.run.test_run import check_archive, run_scenario

pytestmark = pytest.mark.integration
SENDER_NODES, RECEIVER_NODES, PROCESSES, THREADS = 2, 1, 2, 4  # THREADS: per node
PER_PROCESS = THREADS // PROCESSES
SCENARIO = f"""
format_version = 1
name = "redis-processes"
profile = "redis-wait1"
[cluster]
target = "local"
nodes = 3
[workload]
message_bytes = 1024
send_batch_min = 1
send_batch_max = 10
receive_batch_max = 10
duration_s = 5
warmup_s = 1
[clients]
sender_nodes = {SENDER_NODES}
receiver_nodes = {RECEIVER_NODES}
threads = {THREADS}
processes_per_node = {PROCESSES}
"""


def test_several_processes_per_node_account_for_every_sender_id(
    tmp_path: Path, shared_lab: SharedLab
) -> None:
    shared_lab.cluster("redis")
    run, proc = run_scenario(SCENARIO, tmp_path, shared_lab, "processes")
    summary = check_archive(run.path)  # a folder per process, every node, all ok
    manifest = read_json(run.path / "manifest.json")
    assert manifest["clients"] == {
        "processes_per_node": PROCESSES,
        "processes": {"sender": [PROCESSES] * SENDER_NODES, "receiver": [PROCESSES]},
        "threads_per_node": {"sender": THREADS, "receiver": THREADS},
        "send_paths": ["compiled-lanes"],  # each process's closed-loop senders: one thread
        "receive_paths": ["compiled-lanes"],  # and its receivers: one thread, in C
    }
    workers = run.path / "workers"
    sender_dirs = sorted(workers.glob("sender-*"))
    receiver_dirs = sorted(workers.glob("receiver-*"))
    assert [d.name for d in sender_dirs] == [
        "sender-00-p00",
        "sender-00-p01",
        "sender-01-p00",
        "sender-01-p01",
    ]
    assert [d.name for d in receiver_dirs] == ["receiver-00-p00", "receiver-00-p01"]
    for d in sender_dirs + receiver_dirs:  # 2 per node, each naming its node and process
        w = records.read_worker(d / "worker.json")
        node, process = int(d.name[len(w.role) + 1 :][:2]), int(d.name[-2:])
        assert (w.worker_id, w.node, w.process, w.threads) == (d.name, node, process, PER_PROCESS)
        assert w.send_path == ("compiled-lanes" if w.role == "sender" else None)
        assert w.receive_path == (None if w.role == "sender" else "compiled-lanes")

    # sender ids: each sender thread of each node sends as its own id, node * THREADS + i
    sent: dict[int, records.SentSender] = {}
    for d in sender_dirs:
        mine = records.read_sent(d / "sent.json")
        assert sorted(mine) == records.read_worker(d / "worker.json").sender_ids
        assert not set(mine) & set(sent), d.name  # no id in two processes
        sent.update(mine)
        assert all(s.confirmed > 0 for s in mine.values()), d.name  # every thread sent
    assert sorted(sent) == list(range(SENDER_NODES * THREADS))  # the processes add none

    # delivery, per sender id: C confirmed, U received by any receiver process, B left
    received: dict[int, list[records.ReceivedSender]] = {}
    for d in receiver_dirs:
        for sid, r in records.read_delivery(d / "delivery.json").senders.items():
            received.setdefault(sid, []).append(r)
    assert set(received) <= set(sent)
    undrained = records.read_undrained(run.path / "undrained.json")
    expected_rows = []
    for sid in sorted(sent):
        s, rs = sent[sid], received.get(sid, [])
        seen = BitMap64()
        for r in rs:
            seen |= r.seqs
        held = undrained.senders.get(sid, BitMap64())
        n_received = sum(r.received for r in rs)
        expected_rows.append(
            {
                "sender_id": sid,
                "sent": s.sent,
                "confirmed": s.confirmed,
                "received": n_received,
                "unique_received": len(seen),
                "duplicated": n_received - len(seen),
                "lost": len(s.confirmed_seqs - seen - held),
            }
        )
    rows = read_run_table(run.path, "delivery").to_pylist()
    assert [{k: row[k] for k in expected_rows[0]} for row in rows] == expected_rows
    d = summary["delivery"]
    for figure in ("sent", "confirmed", "received", "unique_received", "duplicated", "lost"):
        assert d[figure] == sum(row[figure] for row in expected_rows), figure
    assert d["lost"] == 0 and d["failed"] == 0 and d["unique_received"] == d["confirmed"], d

    # send msgs/s: the sum over the processes of their counted confirmations, over the
    # measured period (first counted interval's start to the last counted confirmation)
    warmup_end = manifest["measure"]["warmup_end_ms"]
    counted, starts, last = [], [], []
    for dd in sender_dirs:
        rows_csv, problems = codecs.parse_counts((dd / "counts.csv").read_text())
        assert problems == []
        measured = [r for r in rows_csv if r.start_ms >= warmup_end]
        counted.append(sum(r.counts["confirmed"] for r in measured))
        starts.append(min(r.start_ms for r in measured))
        last.append(max(r.last_ms for r in measured if r.counts["confirmed"]))
    seconds = (max(last) - min(starts)) / 1000
    assert all(n > 0 for n in counted), counted
    per_process = [n / seconds for n in counted]
    assert summary["throughput"]["send_msgs_per_s"] == round(sum(counted) / seconds, 3)
    assert abs(summary["throughput"]["send_msgs_per_s"] - sum(per_process)) < 1e-3
    # the run table names the shape: 2 threads per process, 2 processes per node
    runs_row = read_run_table(run.path, "runs").to_pylist()[0]
    assert (runs_row["sender_processes"], runs_row["receiver_processes"]) == (2, 2)
    assert (runs_row["sender_nodes"], runs_row["sender_threads"]) == (SENDER_NODES, PER_PROCESS)
    assert "Processes" in proc.stdout
    # the closed-loop invariant: every sender thread of both nodes, and Little's law from
    # the raw send latency logs (hdrh's reader) as the summary has it
    sat = summary["saturation"]
    assert sat["senders"] == SENDER_NODES * THREADS
    want = littles_law(run.path, warmup_end)
    assert want is not None and sat["effective_concurrency"] == pytest.approx(want, abs=0.006)


FIXED_RATE = """
format_version = 1
name = "redis-fixed-rate"
profile = "redis-wait1"
[cluster]
target = "local"
nodes = 3
[workload]
message_bytes = 1024
send_batch_min = 1
send_batch_max = 1
receive_batch_max = 10
mode = "fixed_rate"
rate_per_s = 150
duration_s = 6
warmup_s = 1
[clients]
sender_nodes = 1
receiver_nodes = 1
threads = 2
"""


def test_a_fixed_rate_scenario_offers_its_stated_load_whatever_the_cores(
    tmp_path: Path, shared_lab: SharedLab
) -> None:
    # 1 sender node x 2 threads x 150 msgs/s, processes left out: 300 msgs/s as the file
    # says (the old meaning sent cores x 300: 600 on this 2-core machine)
    shared_lab.cluster("redis")
    run, _proc = run_scenario(FIXED_RATE, tmp_path, shared_lab, "fixed-rate")
    summary = check_archive(run.path)
    manifest = read_json(run.path / "manifest.json")
    cores = os.cpu_count() or 1
    assert manifest["clients"]["processes"] == {
        "sender": [min(cores, 2)],
        "receiver": [min(cores, 2)],
    }
    assert manifest["clients"]["threads_per_node"] == {"sender": 2, "receiver": 2}
    # the senders' own counts over the measured period: intended sends of 2 threads
    warmup_end = manifest["measure"]["warmup_end_ms"]
    sent, starts, ends, threads = 0, [], [], 0
    for d in sorted((run.path / "workers").glob("sender-*")):
        threads += records.read_worker(d / "worker.json").threads
        rows_csv, problems = codecs.parse_counts((d / "counts.csv").read_text())
        assert problems == []
        measured = [r for r in rows_csv if r.start_ms >= warmup_end]
        sent += sum(r.counts["sent"] for r in measured)
        starts.append(min(r.start_ms for r in measured))
        ends.append(max(r.end_ms for r in measured))
    assert threads == 2
    rate = sent / ((max(ends) - min(starts)) / 1000)
    assert 0.8 * 300 <= rate <= 1.2 * 300, rate  # 300, not 600
    assert 0.8 * 300 <= summary["throughput"]["send_msgs_per_s"] <= 1.2 * 300
