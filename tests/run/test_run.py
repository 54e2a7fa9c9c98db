"""`mqlab run` end to end on real local clusters, and the archive it leaves."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from mqlab.archive.formats import read_json
from mqlab.archive.layout import RunInfo, list_runs
from tests.conftest import SharedLab, ctrl_c_able, processes_mentioning
from tests.fixtures import reference

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# (scenario, broker); the quickstart brings its own cluster up and down, the others run
# against the session's shared clusters (the "cluster already up" path)
SHORT_SCENARIOS = [
    ("quickstart.toml", None),
    ("postgres-short.toml", "postgres"),
    ("redis-short.toml", "redis"),
    ("rabbitmq-short.toml", "rabbitmq"),
    ("kafka-short.toml", "kafka"),
    ("redpanda-short.toml", "redpanda"),
    ("sqs-short.toml", "sqs"),
    ("mongodb-short.toml", "mongodb"),
    ("pulsar-short.toml", "pulsar"),
    ("artemis-short.toml", "artemis"),
]
STAND_INS = ("redpanda", "sqs", "mongodb")


def mqlab(
    *args: str, env_state: Path, timeout: float = 300, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MQLAB_STATE_DIR": str(env_state)}
    return subprocess.run(
        [sys.executable, "-m", "mqlab", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def run_scenario(
    text: str, tmp_path: Path, shared_lab: SharedLab, name: str
) -> tuple[RunInfo, subprocess.CompletedProcess[str]]:
    """``mqlab run`` of ``text`` (written to ``tmp_path/<name>.toml``) on the shared lab,
    into ``tmp_path/results``: it must exit 0 and archive one run; that run and the
    command's outcome."""
    scenario = tmp_path / f"{name}.toml"
    scenario.write_text(text)
    results = tmp_path / "results"
    proc = mqlab("run", str(scenario), "--results", str(results), env_state=shared_lab.root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = list_runs(results)
    return run, proc


def check_archive(run_dir: Path, expect_complete: bool = True) -> dict:
    manifest = read_json(run_dir / "manifest.json")
    assert manifest["status"] == ("complete" if expect_complete else "partial"), manifest[
        "end_reason"
    ]
    for key in (
        "mqlab",
        "python",
        "libraries",
        "broker",
        "host",
        "clock",
        "measure",
        "started_at",
        "ended_at",
    ):
        assert manifest[key], key
    assert manifest["broker"]["server_versions"]
    assert manifest["host"]["cpus"] and manifest["host"]["kernel"]
    scenario = tomllib.loads((run_dir / "scenario.toml").read_text())
    assert scenario["resolved_profile"]["settings"]
    c = scenario["clients"]
    senders = sorted((run_dir / "workers").glob("sender-*"))
    receivers = sorted((run_dir / "workers").glob("receiver-*"))
    # one worker folder per process of every client node; the processes per node as the
    # scenario says, else this machine's cores (every node of a local run is here),
    # lowered to the most that divide the role's threads; the node's threads spread
    # over them evenly
    procs = c.get("processes_per_node", os.cpu_count())
    per_node = {
        role: max(p for p in range(1, procs + 1) if c[f"{role}_threads"] % p == 0)
        for role in ("sender", "receiver")
    }
    assert manifest["clients"]["processes"] == {
        role: [per_node[role]] * c[f"{role}_nodes"] for role in ("sender", "receiver")
    }
    assert len(senders) == c["sender_nodes"] * per_node["sender"]
    assert len(receivers) == c["receiver_nodes"] * per_node["receiver"]
    for role, dirs in (("sender", senders), ("receiver", receivers)):
        threads = sum(read_json(d / "worker.json")["threads"] for d in dirs)
        assert threads == c[f"{role}_nodes"] * c[f"{role}_threads"], (role, threads)
    for role, dirs in (("sender", senders), ("receiver", receivers)):
        nodes = [read_json(d / "worker.json")["node"] for d in dirs]
        assert sorted(set(nodes)) == list(range(c[f"{role}_nodes"])), nodes
    for d in senders + receivers:
        assert read_json(d / "worker.json")["status"] == (
            "ok" if expect_complete else read_json(d / "worker.json")["status"]
        )
    # the logs are standard: hdrh's reader gets every interval back
    for f in [*run_dir.glob("workers/*/*.hlog")]:
        reader = HistogramLogReader(str(f), HdrHistogram(1, 3_600_000_000, 3))
        total = 0
        while (h := reader.get_next_interval_histogram()) is not None:
            total += h.get_total_count()
        if f.name == "processing_us.hlog" and expect_complete:
            assert total > 0
    # nothing machine-private: no host name, no absolute path of this checkout
    host = os.uname().nodename
    for p in [
        run_dir / "manifest.json",
        run_dir / "scenario.toml",
        *run_dir.glob("workers/*/worker.json"),
    ]:
        text = p.read_text()
        assert not re.search(rf"(?<![\w-]){re.escape(host)}(?![\w-])", text), (p, host)
        assert str(ROOT) not in text and str(Path.home()) + "/" not in text, p
    summary = read_json(run_dir / "summary.json")
    check_cpu(run_dir, manifest, summary, per_node, expect_complete)
    return summary


def check_cpu(
    run_dir: Path, manifest: dict, summary: dict, per_node: dict[str, int], complete: bool
) -> None:
    """A cpu.csv per worker process, and per broker node where mqlab started the nodes on
    this machine; the summary's CPU of each node is what those files add up to."""
    c = tomllib.loads((run_dir / "scenario.toml").read_text())["clients"]
    got = {n["node"]: n for n in summary["saturation"]["nodes"]}
    warm = manifest["measure"]["warmup_end_ms"]
    ends = {
        r: summary["measured"][n]["end_ms"]
        for r, n in (("sender", "send"), ("receiver", "receive"))
    }
    for role in ("sender", "receiver"):
        for node in range(c[f"{role}_nodes"]):
            key = f"{role}-{node:02d}"
            paths = sorted(run_dir.glob(f"workers/{key}*/cpu.csv"))
            assert len(paths) == per_node[role], key
            cores = read_json(paths[0].parent / "worker.json")["cores"]
            assert cores == len(os.sched_getaffinity(0)) and got[key]["cores"] == cores
            if complete and ends[role] is not None:
                cpu_s, fraction = reference.node_cpu(paths, warm, ends[role], cores)
                assert got[key]["cpu_s"] == pytest.approx(cpu_s, abs=2e-3), key
                if fraction is None:  # no whole interval in the period: unknown
                    assert got[key]["fraction"] is None, key
                else:
                    assert got[key]["fraction"] == pytest.approx(fraction, abs=1e-3), key
                    assert 0 < fraction <= 1.05, key  # used some CPU, at most its cores
    section = manifest.get("cpu")
    if section is None and not complete:
        return  # stopped before the measured run began
    assert section is not None
    assert section["brokers_recorded"] is (manifest["cluster"]["target"] == "local"), section
    if section["brokers_recorded"]:
        known = [e for e in ends.values() if e is not None]
        starts = [summary["measured"][n]["start_ms"] for n in ("send", "receive")]
        for node in section["broker_nodes"]:
            path = run_dir / "brokers" / f"node-{node:02d}" / "cpu.csv"
            if complete and known:
                lo = min(s for s in starts if s is not None)
                cpu_s, _ = reference.node_cpu([path], lo, max(known), section["broker_cores"])
                assert got[f"broker-{node:02d}"]["cpu_s"] == pytest.approx(cpu_s, abs=2e-3)


@pytest.mark.parametrize(("name", "shared"), SHORT_SCENARIOS, ids=[n for n, _ in SHORT_SCENARIOS])
def test_short_run_per_driver_leaves_a_complete_archive_with_nothing_lost(
    name: str, shared: str | None, tmp_path: Path, state_dir: Path, shared_lab: SharedLab
) -> None:
    results = tmp_path / "results"
    state = state_dir
    if shared is not None:
        shared_lab.cluster(shared)
        state = shared_lab.root
    proc = mqlab("run", f"scenarios/{name}", "--results", str(results), env_state=state)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = list_runs(results)
    summary = check_archive(run.path)
    assert run.manifest["cluster"]["reused"] is (shared is not None)
    d = summary["delivery"]
    assert summary["unknown"] == {} and summary["status"] == "complete"
    assert d["sent"] > 0 and d["confirmed"] == d["sent"] and d["failed"] == 0
    assert d["lost"] == 0 and d["undrained"] == 0 and d["unique_received"] == d["confirmed"]
    assert d["foreign"] == 0 and d["unsent"] == 0
    assert (
        summary["throughput"]["send_msgs_per_s"] > 0
        and summary["throughput"]["receive_msgs_per_s"] > 0
    )
    assert summary["latency_us"]["processing_us"]["count"] > 0
    # the printed mqperf-style row
    # (the console wraps a title over lines when the marks column makes the table wide)
    assert all(w in proc.stdout for w in ("Send", "msgs/s", "Lost", "Status")), proc.stdout
    # a stand-in (tansu, moto, mongoeco) serves instead of the real system: marked as such
    if shared in STAND_INS:
        assert summary["stand_in"] and run.manifest["broker"]["stand_in"] == summary["stand_in"]
        printed = " ".join(proc.stdout.split())  # the note, however the console wrapped it
        assert f"stand-in: {summary['stand_in']} served" in printed
    else:
        assert summary["stand_in"] is None and run.manifest["broker"]["stand_in"] is None


FAILOVER = """
name = "nats-failover"
profile = "nats-r3"
[cluster]
nodes = 3
[workload]
message_bytes = 512
duration_s = 14
warmup_s = 0
[clients]
sender_nodes = 1
receiver_nodes = 1
threads = 2
[[faults]]
at_s = 4
action = "kill_node"
node = {node}
restart_after_s = 5
"""


def test_killing_a_nats_node_mid_run_loses_nothing(tmp_path: Path, state_dir: Path) -> None:
    scenario = tmp_path / "failover.toml"
    scenario.write_text(FAILOVER.format(node=0))
    results = tmp_path / "results"
    # a relative results folder, as `scripts/mqlab run` uses by default: workers run in
    # their own folders, so every path handed to them must still resolve
    proc = mqlab("run", "failover.toml", "--results", "results", env_state=state_dir, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = list_runs(results)
    summary = check_archive(run.path)
    manifest = read_json(run.path / "manifest.json")
    assert [f["action"] for f in manifest["faults"]] == ["kill_node", "restart_node"]
    d = summary["delivery"]
    assert d["confirmed"] > 0 and d["lost"] == 0, d
    # a send that timed out during the failover may still have been stored: such messages
    # are received (not lost, not duplicated) but were never confirmed
    assert d["confirmed"] <= d["unique_received"] <= d["sent"], d


def _counted(counts_csv: Path, column: str) -> int:
    """The sum of ``column`` over the rows a worker's counts.csv holds so far (it writes
    and flushes one row per second while it runs)."""
    try:
        text = counts_csv.read_text()
    except FileNotFoundError:
        return 0
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines = lines[:-1]  # a row still being written
    return sum(int(r[column]) for r in csv.DictReader(lines))


def test_interrupted_run_leaves_a_partial_archive_and_no_processes(
    tmp_path: Path, state_dir: Path
) -> None:
    scenario = tmp_path / "long.toml"
    scenario.write_text(
        FAILOVER.replace("duration_s = 14", "duration_s = 120").split("[[faults]]")[0]
    )
    results = tmp_path / "results"
    env = {**os.environ, "MQLAB_STATE_DIR": str(state_dir)}
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as out_f, err.open("w") as err_f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mqlab", "run", str(scenario), "--results", str(results)],
            env=env,
            cwd=ROOT,
            stdout=out_f,
            stderr=err_f,
            text=True,
            preexec_fn=ctrl_c_able,
        )
    try:
        # wait (bounded) until the workers' own counters show messages confirmed and
        # received, then interrupt: the run is in the middle of measuring
        confirmed = received = 0
        deadline = time.monotonic() + 120
        while confirmed < 100 or received < 100:
            if proc.poll() is not None:
                pytest.fail(f"mqlab run ended before it was interrupted: {err.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"no progress within 120 s (confirmed {confirmed}, received {received}): "
                    + err.read_text()[-2000:]
                )
            time.sleep(0.2)  # poll interval of the progress check, not a wait for an event
            confirmed = sum(
                _counted(p, "confirmed") for p in results.glob("*/workers/sender-*/counts.csv")
            )
            received = sum(
                _counted(p, "received") for p in results.glob("*/workers/receiver-*/counts.csv")
            )
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:  # a failed wait: still let mqlab stop its cluster itself
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 1, err.read_text()[-2000:]
    [run] = list_runs(results)
    manifest = read_json(run.path / "manifest.json")
    assert manifest["status"] == "partial" and manifest["end_reason"] == "interrupted"
    summary = read_json(run.path / "summary.json")
    # what was collected is kept: at least what the workers had counted before the SIGINT
    d = summary["delivery"]
    assert d["confirmed"] >= confirmed and d["received"] >= received, (d, confirmed, received)
    workers = sorted((run.path / "workers").iterdir())
    assert {w.name.split("-")[0] for w in workers} == {"sender", "receiver"}
    for worker in workers:
        assert read_json(worker / "worker.json")["status"] == "interrupted", worker.name
    assert not processes_mentioning(str(state_dir))


def test_cluster_up_status_down_and_a_run_reuses_it(tmp_path: Path, state_dir: Path) -> None:
    try:
        up = mqlab("cluster", "up", "nats", env_state=state_dir)
        assert up.returncode == 0, up.stderr
        state = json.loads((state_dir / "clusters" / "nats" / "state.json").read_text())
        pids = [p["pid"] for p in state["procs"].values()]
        assert len(pids) == 3 and all(Path(f"/proc/{p}").exists() for p in pids)
        st = mqlab("cluster", "status", "nats", env_state=state_dir)
        assert st.returncode == 0 and json.loads(st.stdout)["healthy"] is True
        again = mqlab("cluster", "up", "nats", env_state=state_dir)
        assert again.returncode == 2 and "already up" in again.stderr
        scenario = tmp_path / "s.toml"
        scenario.write_text(
            FAILOVER.replace("duration_s = 14", "duration_s = 2").split("[[faults]]")[0]
        )
        results = tmp_path / "results"
        run = mqlab("run", str(scenario), "--results", str(results), env_state=state_dir)
        assert run.returncode == 0, run.stderr[-2000:]
        [info] = list_runs(results)
        assert info.manifest["cluster"]["reused"] is True
        assert all(Path(f"/proc/{p}").exists() for p in pids)  # the run left it up
    finally:
        down = mqlab("cluster", "down", "nats", env_state=state_dir)
    assert down.returncode == 0
    assert not processes_mentioning(str(state_dir))
    st = mqlab("cluster", "status", "nats", env_state=state_dir)
    assert st.returncode == 1


FIXED_RATE = """
name = "fixed-rate"
profile = "{profile}"
[cluster]
nodes = 3
[workload]
message_bytes = 256
send_batch_min = 1
send_batch_max = 1
mode = "fixed_rate"
rate_per_s = 100.0
duration_s = 11
warmup_s = 2
[clients]
sender_nodes = 1
receiver_nodes = 1
threads = 2
"""


@pytest.mark.parametrize("broker,profile", [("nats", "nats-r3"), ("redis", "redis-wait1")])
def test_fixed_rate_run_summarizes_to_the_scheduled_rate_and_is_queryable_at_once(
    broker: str, profile: str, tmp_path: Path, shared_lab: SharedLab
) -> None:
    shared_lab.cluster(broker)
    run, _ = run_scenario(FIXED_RATE.format(profile=profile), tmp_path, shared_lab, "rate")
    results = tmp_path / "results"
    summary = check_archive(run.path)
    tp, d = summary["throughput"], summary["delivery"]
    # the node's 2 threads x 100 msg/s (rate_per_s is per sender thread), however many
    # processes they were spread over, measured over exactly the counted period
    rate = 2 * 100
    assert abs(tp["send_msgs_per_s"] / rate - 1) < 0.01, tp
    assert abs(tp["receive_msgs_per_s"] / rate - 1) < 0.01, tp
    # every slot before the end is sent or unsent: the slots of a thread behind its
    # schedule when the run ended (a busy 2-core machine: a stalled call near the end)
    # are unsent by definition, each recorded with its latency (stop - slot)
    assert d["confirmed"] + d["failed"] + d["unsent"] == rate * 11 and d["lost"] == 0, d
    assert d["sent"] == d["confirmed"] + d["failed"] and d["failed"] == 0, d
    # a thread's unsent slots are consecutive, 10 ms apart, so its latencies span them:
    # at most one per thread beyond what the longest recorded send latency covers
    longest_ms = summary["latency_us"]["send_msg_us"]["max"] / 1000
    assert d["unsent"] <= 2 * (1 + longest_ms // 10), (d, longest_ms)
    assert summary["sender_lag_ms_max"] < 500, summary
    # well within what clients and broker can do: neither mark
    sat = summary["saturation"]
    assert sat["client_bound"] is False and sat["receivers_behind"] is False, sat
    assert sat["shared_cores"] is True
    assert summary["latency_us"]["processing_us"]["p50"] < 20_000, summary["latency_us"]
    # the run is in the catalog right after `mqlab run`, with the same figures
    q = mqlab(
        "query",
        "SELECT run_id, send_msgs_per_s, delivery_lost FROM runs",
        "--json",
        "--results",
        str(results),
        env_state=shared_lab.root,
    )
    assert q.returncode == 0 and "lacks" not in q.stderr, q.stderr
    [row] = json.loads(q.stdout)
    assert row["run_id"] == run.run_id and row["send_msgs_per_s"] == tp["send_msgs_per_s"]
    assert row["delivery_lost"] == 0


BURST = """
name = "burst"
profile = "redis-wait1"
[cluster]
nodes = 3
[workload]
message_bytes = 256
messages_per_thread = 300
warmup_s = 0
[clients]
sender_nodes = 1
receiver_nodes = 1
threads = 2
processes_per_node = 1
"""


def test_a_run_shorter_than_a_second_counts_every_message_in_its_measured_period(
    tmp_path: Path, shared_lab: SharedLab
) -> None:
    """Workers close an interval where the measured period starts, so a run that ends
    inside the second it began in is counted whole: with no warm-up every confirmed send
    and every receipt lies in the measured period (before, the receivers' interval that
    began before the senders' start was left out, and such a run showed 0 msgs/s)."""
    shared_lab.cluster("redis")
    run, _ = run_scenario(BURST, tmp_path, shared_lab, "burst")
    summary = check_archive(run.path)
    d, tp, m = summary["delivery"], summary["throughput"], summary["measured"]
    assert d["confirmed"] == 600 and d["lost"] == 0 and d["received"] == 600, d
    for role, n in (("send", d["confirmed"]), ("receive", d["received"])):
        counted = tp[f"{role}_msgs_per_s"] * m[role]["period_s"]
        assert abs(counted - n) < 1, (role, counted, n, m)
    # the receiver closed an interval when told of the start, before any sender went:
    # what began before the measured period holds no receipt, the rest holds all 600
    with (run.path / "workers" / "receiver-00" / "counts.csv").open(newline="") as f:
        rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
    before = [r for r in rows if r["start_ms"] < m["warmup_end_ms"]]
    assert before and sum(r["received"] for r in before) == 0, rows
    assert sum(r["received"] for r in rows if r not in before) == 600, rows
