"""A run over several queues (``workload.queues``), end to end through ``mqlab run`` on
the shared local clusters: every queue is created (the broker lists it while the run is
on) and removed (the broker no longer lists it afterwards), each receiver thread reads
only the senders of its queue, and every sender's confirmed messages are received.

The broker is asked with its own tools (NATS's monitoring endpoint, a Redis client, SQL
on PostgreSQL's catalog), not through mqlab's driver. Expected values come from the
documented assignment: sender id s sends to queue s % N, receiver index r receives from
queue r % N."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from mqlab.analysis.catalog import read_run_table
from mqlab.archive import records
from mqlab.archive.formats import read_json
from mqlab.archive.layout import list_runs
from mqlab.brokers.cluster import LocalCluster
from mqlab.report.markdown import report_run
from tests.conftest import SharedLab
from tests.run.test_run import check_archive, mqlab

pytestmark = pytest.mark.integration
QUEUES, SENDERS = 3, 6  # 6 sender threads: 2 per queue
SCENARIO = """
format_version = 1
name = "{broker}-queues"
profile = "{profile}"
[cluster]
target = "local"
nodes = 3
[workload]
message_bytes = 256
send_batch_min = 1
send_batch_max = 5
receive_batch_max = 10
duration_s = 2
warmup_s = 0
queues = {queues}
drain_timeout_s = 20
[clients]
sender_nodes = 1
receiver_nodes = {queues}  # one receiver thread per node: receiver node r reads queue r
sender_threads = {senders}
receiver_threads = 1
processes_per_node = 1
"""


def nats_streams(cluster: LocalCluster) -> set[str]:
    """Stream names every reachable NATS server reports (its monitoring endpoint)."""
    names: set[str] = set()
    for port in cluster.ports["http"]:  # type: ignore[attr-defined]
        url = f"http://127.0.0.1:{port}/jsz?accounts=true&streams=true"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                doc = json.loads(r.read())
        except OSError:
            continue
        for account in doc.get("account_details") or []:
            names |= {s["name"] for s in account.get("stream_detail") or []}
    return names


def redis_keys(cluster: LocalCluster) -> set[str]:
    """Stream keys on any Redis node (primary and replicas)."""
    names: set[str] = set()
    for port in cluster.ports["client"]:  # type: ignore[attr-defined]
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        try:
            names |= {k.decode() for k in r.scan_iter(match="mqlab_*", _type="stream")}
        except redis.RedisError:
            continue
        finally:
            r.close()
    return names


def postgres_tables(cluster: LocalCluster) -> set[str]:
    """Tables of the primary (node 0) named like a run's queues."""
    port = cluster.ports["pg"][0]  # type: ignore[attr-defined]
    try:
        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=2
        ) as c:
            rows = c.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'mqlab\\_%'"
            ).fetchall()
    except psycopg.Error:
        return set()
    return {str(r[0]) for r in rows}


ASK: dict[str, tuple[str, Callable[[LocalCluster], set[str]]]] = {
    "nats": ("nats-r3", nats_streams),
    "redis": ("redis-wait1", redis_keys),
    "postgres": ("postgres-sync", postgres_tables),
}


class Watch:
    """Polls the broker's queue names in a thread while the run goes on."""

    def __init__(self, ask: Callable[[], set[str]]):
        self.ask = ask
        self.before = ask()
        self.seen: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.wait(0.1):
            self.seen |= self.ask() - self.before

    def left_after(self, timeout_s: float = 10.0) -> set[str]:
        """The run's queues the broker still lists once its replicas caught up."""
        self.stop.set()
        self.thread.join(5)
        deadline = time.monotonic() + timeout_s
        while (left := self.ask() - self.before) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left


@pytest.mark.parametrize("broker", list(ASK))
def test_a_run_over_three_queues_creates_uses_and_removes_each(
    broker: str, tmp_path: Path, shared_lab: SharedLab
) -> None:
    profile, ask = ASK[broker]
    cluster = shared_lab.cluster(broker)
    scenario = tmp_path / "queues.toml"
    scenario.write_text(
        SCENARIO.format(broker=broker, profile=profile, queues=QUEUES, senders=SENDERS)
    )
    results = tmp_path / "results"
    watch = Watch(lambda: ask(cluster))
    proc = mqlab("run", str(scenario), "--results", str(results), env_state=shared_lab.root)
    left = watch.left_after()
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = list_runs(results)
    summary = check_archive(run.path)

    # the queues: named after the run's queue, each listed by the broker during the run
    # and gone after it
    manifest = read_json(run.path / "manifest.json")
    names = manifest["queue_names"]
    assert manifest["queues"] == QUEUES and len(names) == QUEUES
    base = names[0][: -len("_q00")]
    assert names == [f"{base}_q{i:02d}" for i in range(QUEUES)]
    assert watch.seen == set(names), (watch.seen, names)
    assert left == set(), left

    # each receiver (one thread per node: receiver index = node) got exactly the senders
    # of its queue, every confirmed message of each
    sent: dict[int, records.SentSender] = {}
    for d in sorted((run.path / "workers").glob("sender-*")):
        sent.update(records.read_sent(d / "sent.json"))
    assert sorted(sent) == list(range(SENDERS))
    assert all(s.confirmed > 0 and s.failed == 0 for s in sent.values()), sent
    for r in range(QUEUES):
        [d] = (run.path / "workers").glob(f"receiver-{r:02d}*")
        got = records.read_delivery(d / "delivery.json").senders
        assert sorted(got) == [s for s in range(SENDERS) if s % QUEUES == r], (r, sorted(got))
        for sid, rec in got.items():
            assert rec.seqs == sent[sid].confirmed_seqs, (r, sid)

    # what the broker held afterwards, per queue and in sum: nothing
    undrained = records.read_undrained(run.path / "undrained.json")
    assert undrained.count == 0 and undrained.error is None
    assert sorted(undrained.queues) == names
    assert all(q["count"] == 0 for q in undrained.queues.values()), undrained.queues

    d = summary["delivery"]
    total = sum(s.confirmed for s in sent.values())
    assert summary["status"] == "complete" and summary["unknown"] == {}
    assert d["sent"] == d["confirmed"] == d["unique_received"] == total, d
    assert d["lost"] == 0 and d["undrained"] == 0 and d["failed"] == 0, d
    rows = read_run_table(run.path, "delivery").to_pylist()
    assert [(row["sender_id"], row["lost"], row["unique_received"]) for row in rows] == [
        (s, 0, sent[s].confirmed) for s in range(SENDERS)
    ]

    # the number of queues: in the runs table, summary.json, the printed notes, the report
    assert read_run_table(run.path, "runs").to_pylist()[0]["queues"] == QUEUES
    assert summary["queues"] == QUEUES
    printed = " ".join(proc.stdout.split())
    assert f"{QUEUES} queues: sender thread s sends to queue s mod {QUEUES}" in printed
    assert f"{QUEUES} queues:" in report_run(run.path).read_text()


def test_one_queue_keeps_the_runs_queue_name(tmp_path: Path, shared_lab: SharedLab) -> None:
    """queues = 1 (the default): the queue is named as runs always named it."""
    cluster = shared_lab.cluster("redis")
    scenario = tmp_path / "one.toml"
    text = SCENARIO.format(broker="redis", profile="redis-wait1", queues=1, senders=1)
    scenario.write_text(text.replace("queues = 1\n", ""))
    watch = Watch(lambda: redis_keys(cluster))
    results = tmp_path / "results"
    proc = mqlab("run", str(scenario), "--results", str(results), env_state=shared_lab.root)
    left = watch.left_after()
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = list_runs(results)
    summary = check_archive(run.path)
    manifest: dict[str, Any] = read_json(run.path / "manifest.json")
    [name] = manifest["queue_names"]
    stamp = run.path.name.split("_")[0].replace("-", "").lower()
    assert name.startswith(f"mqlab_{stamp}_") and "_q" not in name[len("mqlab_") :]
    assert watch.seen == {name} and left == set()
    assert manifest["queues"] == 1 and "queues" not in summary  # summary.json as before
    assert read_run_table(run.path, "runs").to_pylist()[0]["queues"] == 1
    assert "queues" not in read_json(run.path / "undrained.json")  # as it always was
    d = summary["delivery"]
    assert d["lost"] == 0 and d["confirmed"] > 0 and d["unique_received"] == d["confirmed"]
    assert "queues:" not in proc.stdout
