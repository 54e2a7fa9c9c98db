"""The summary's plan (run metadata, one task per raw file) and its handling of missing,
corrupt and unreadable files, run without Spark."""

from __future__ import annotations

import json
from pathlib import Path

from mqlab.analysis import catalog, partials, plan
from mqlab.analysis.job import summarize_run
from mqlab.archive import layout, records
from mqlab.archive.formats import read_json, write_json
from tests.fixtures.summarized import summarize_locally
from tests.fixtures.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run


def test_run_metadata_reads_scenario_workers_and_manifest(tmp_path: Path) -> None:
    spec = SyntheticSpec(
        sender_nodes=2,
        receiver_nodes=3,
        sender_threads=4,
        receiver_threads=6,
        message_bytes=100,
        batch=7,
        duration_s=3,
    )
    r = write_synthetic_run(tmp_path, spec)
    m = plan.read_run(r.run_dir)
    assert r.run_dir.name.endswith("_quickstart_nats-r3_4x6t-2s-3r")
    assert (m.broker, m.profile, m.scenario) == ("nats", "nats-r3", "quickstart")
    assert (m.sender_threads, m.receiver_threads, m.sender_nodes, m.receiver_nodes) == (4, 6, 2, 3)
    assert (m.message_bytes, m.batch) == (100, 7)
    assert (m.measure_start_ms, m.warmup_end_ms) == (r.go_ms, r.warmup_end_ms)
    assert m.status == "complete"
    tasks = plan.tasks_for(m, 60_000)
    kinds = [t.kind for t in tasks]
    # undrained.json; per sender 3 logs, counts, sent, worker; per receiver 2 logs,
    # counts, delivery, worker
    assert len(tasks) == 1 + 2 * 6 + 3 * 5
    assert kinds.count("hlog") == 2 * 3 + 3 * 2 and kinds.count("undrained") == 1
    assert {t.metric for t in tasks if t.kind == "hlog"} == set(layout.METRICS)


def _as_processes_of_one_node(r: SyntheticRun, nodes: int) -> None:
    """Make the ``nodes`` sender and receiver nodes of a synthetic run the processes of one
    node each (``sender-00-p00``, ...), as a run with processes_per_node = nodes leaves
    them: the same logs and records under other ids."""
    workers = []
    for role in layout.ROLES:
        for n in range(nodes):
            old, new = f"{role}-{n:02d}", layout.worker_id(role, 0, n, nodes)
            d = r.run_dir / layout.WORKERS / new
            (r.run_dir / layout.WORKERS / old).rename(d)
            rec = records.read_worker(d / layout.WORKER)
            rec.worker_id, rec.node, rec.process = new, 0, n
            records.write_worker(d / layout.WORKER, rec)
            workers.append({"id": new, "role": role, "node": 0, "process": n, "status": "ok"})
    manifest = read_json(r.run_dir / layout.MANIFEST)
    manifest["workers"] = workers
    write_json(r.run_dir / layout.MANIFEST, manifest)


def test_processes_of_one_node_count_as_one_node_and_merge_like_nodes(tmp_path: Path) -> None:
    spec = SyntheticSpec(sender_nodes=2, receiver_nodes=2, sender_threads=3, duration_s=3)
    r = write_synthetic_run(tmp_path, spec)
    _as_processes_of_one_node(r, 2)
    m = plan.read_run(r.run_dir)
    assert (m.sender_nodes, m.receiver_nodes) == (1, 1)
    assert (m.sender_processes, m.receiver_processes) == (2, 2)
    assert (m.sender_threads, m.receiver_threads) == (3, 5)  # per process
    summary = summarize_run(r.run_dir)
    assert summary["delivery"] == r.delivery  # the workers' records merge as nodes' do
    assert summary["unknown"] == {}
    # a worker whose worker.json is gone: its id still names its node
    (r.run_dir / layout.WORKERS / "sender-00-p01" / layout.WORKER).unlink()
    m = plan.read_run(r.run_dir)
    assert (m.sender_nodes, m.sender_processes) == (1, 2)


def test_an_archive_from_before_processes_has_one_per_node(synthetic_run: SyntheticRun) -> None:
    m = plan.read_run(synthetic_run.run_dir)
    assert (m.sender_processes, m.receiver_processes) == (1, 1)
    assert m.receiver_nodes == synthetic_run.spec.receiver_nodes


def test_queues_reach_the_runs_row_and_summary_and_older_archives_read_one(
    tmp_path: Path,
) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=3))
    manifest = read_json(r.run_dir / layout.MANIFEST)
    assert "queues" not in manifest  # written as archives were before workload.queues
    assert plan.read_run(r.run_dir).queues == 1
    assert "queues" not in summarize_run(r.run_dir)  # one queue: summary.json as before
    assert plan.read_run(r.run_dir).row()["queues"] == 1
    manifest["queues"] = 4
    write_json(r.run_dir / layout.MANIFEST, manifest)
    assert plan.read_run(r.run_dir).queues == 4
    assert plan.read_run(r.run_dir).row()["queues"] == 4
    assert summarize_run(r.run_dir)["queues"] == 4
    assert catalog.read_run_table(r.run_dir, "runs")["queues"].to_pylist() == [4]


def test_missing_and_corrupt_files_are_counted_and_the_rest_summarized(
    synthetic_run: SyntheticRun,
) -> None:
    run_dir = synthetic_run.run_dir
    (run_dir / "workers" / "receiver-01" / "processing_us.hlog").unlink()
    with (run_dir / "workers" / "sender-00" / "counts.csv").open("a") as f:
        f.write("1763806999000,1000,5\n")  # a truncated row
    tbls = summarize_locally([run_dir])[0]
    run = tbls["runs"].to_pylist()[0]
    assert (run["missing_files"], run["bad_lines"]) == (1, 1)
    problems = tbls["problems"].to_pylist()
    assert problems[0]["file"].endswith("receiver-01/processing_us.hlog")
    assert problems[0]["problem"] == "missing file" and problems[0]["line"] is None
    assert problems[1]["file"].endswith("sender-00/counts.csv") and problems[1]["line"] == 40
    assert run["processing_us_count"] > 0 and run["send_msgs_per_s"] > 0
    assert run["status"] == "complete"  # no figure is unknown: the log held latencies only


def test_unreadable_and_foreign_version_records_are_problems(tmp_path: Path) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=3, receiver_nodes=1))
    (r.run_dir / "workers" / "sender-00" / "sent.json").write_text("{not json")
    worker = r.run_dir / "workers" / "receiver-00" / "worker.json"
    worker.write_text(json.dumps({**json.loads(worker.read_text()), "format_version": 1}))
    summary = summarize_run(r.run_dir)
    assert summary["problems"] == {"bad_lines": 0, "missing_files": 2}
    assert "sent.json of sender-00 missing or unreadable" in summary["unknown"]["sent"]
    assert summary["unknown"]["processing_us_below_zero"] == "worker.json missing or unreadable"
    assert summary["delivery"]["received"] is not None
    meta = plan.read_run(r.run_dir)
    results = partials.run_locally(plan.tasks_for(meta, 60_000))
    texts = [p[2] for p in results[("prb", meta.run_id)]]
    assert any(t.startswith("unreadable") for t in texts)
    assert any("format_version 1" in t for t in texts)


def test_the_same_tasks_in_any_order_give_the_same_results(tmp_path: Path) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=4, redelivered_per_sender=1))
    tasks = plan.tasks_for(plan.read_run(r.run_dir), 2_000)
    assert partials.run_locally(tasks) == partials.run_locally(reversed(tasks))


def test_summarize_run_writes_summary_json_parquet_and_the_catalog(tmp_path: Path) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=3))
    summary = summarize_run(r.run_dir)
    assert json.loads((r.run_dir / layout.SUMMARY).read_text()) == summary
    assert sorted(p.name for p in (r.run_dir / layout.SUMMARY_DIR).iterdir()) == [
        "delivery.parquet",
        "faults.parquet",
        "latency.parquet",
        "problems.parquet",
        "run.parquet",
        "timeline.parquet",
        "windows.parquet",
    ]
    assert (tmp_path / ".catalog" / "runs.parquet").is_file()
