"""The load generator's marks (``saturation`` in summary.json): CPU per node, client_bound
and receivers_behind, checked against figures computed here from the raw files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqlab.analysis import saturation
from mqlab.analysis.job import summarize_run
from mqlab.archive import codecs, layout
from mqlab.archive.formats import read_json, write_json
from mqlab.archive.records import read_worker, write_worker
from mqlab.report import listing
from mqlab.report.markdown import report_run
from tests.fixtures import reference
from tests.fixtures.summarized import EDGE_CASES
from tests.fixtures.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run

CORES = 2


def add_cpu(
    run: SyntheticRun,
    used: dict[str, float],
    brokers: float | None = 0.3,
    omit: tuple[str, ...] = (),
) -> None:
    """Give a synthetic run what mqlab writes since it records CPU: a cpu.csv per worker
    on its counts.csv intervals, using ``used[role]`` cores in each, its cores in
    worker.json, every worker on host ``local``, and (``brokers`` cores each) three local
    broker nodes."""
    d = run.run_dir
    for wdir in layout.worker_dirs(d):
        role = layout.role_of(wdir.name)
        rec = read_worker(wdir / layout.WORKER)
        rec.cores = CORES
        write_worker(wdir / layout.WORKER, rec)
        if f"workers/{wdir.name}/cpu.csv" in omit:
            continue
        rows = reference.counts(d, role)  # every worker of a role shares its edges
        edges = sorted({(r["start_ms"], r["length_ms"]) for r in rows})
        with (wdir / layout.CPU).open("w") as f:
            f.write(codecs.cpu_header())
            for start, length in edges:
                us = round(used[role] * length * 1000)
                f.write(codecs.cpu_line(start, length, us * 7 // 10, us - us * 7 // 10))
    manifest = read_json(d / layout.MANIFEST)
    for w in manifest["workers"]:
        w["host"] = "local"
    manifest["cluster"]["target"] = "local"
    if brokers is not None:
        manifest["cpu"] = {
            "brokers_recorded": True,
            "broker_cores": CORES,
            "broker_nodes": [0, 1, 2],
        }
        edges = sorted({(r["start_ms"], r["length_ms"]) for r in reference.counts(d, "receiver")})
        for node in range(3):
            bdir = layout.broker_dir(d, node)
            bdir.mkdir(parents=True)
            with (bdir / layout.CPU).open("w") as f:
                f.write(codecs.cpu_header())
                for start, length in edges:
                    f.write(codecs.cpu_line(start, length, round(brokers * length * 1000), 0))
    write_json(d / layout.MANIFEST, manifest)


def summarized(run: SyntheticRun) -> dict[str, Any]:
    summary = summarize_run(run.run_dir)
    assert read_json(run.run_dir / layout.SUMMARY)["saturation"] == summary["saturation"]
    return summary["saturation"]


def nodes(section: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in section["nodes"]}


def expected_node(run: SyntheticRun, role: str, node: int) -> tuple[float, float | None]:
    d = run.run_dir
    paths = sorted(d.glob(f"workers/{role}-{node:02d}*/cpu.csv"))
    p = reference.period(d, role, run.warmup_end_ms)
    return reference.node_cpu(paths, run.warmup_end_ms, p.end_ms, CORES)


def test_each_node_s_cpu_is_its_files_over_its_role_s_measured_period(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SyntheticSpec())
    add_cpu(run, {"sender": 0.6, "receiver": 0.25})
    section = summarized(run)
    got = nodes(section)
    assert set(got) == {
        "sender-00",
        "receiver-00",
        "receiver-01",
        "broker-00",
        "broker-01",
        "broker-02",
    }
    for key, role, node in (("sender-00", "sender", 0), ("receiver-01", "receiver", 1)):
        cpu_s, fraction = expected_node(run, role, node)
        assert got[key]["cpu_s"] == pytest.approx(cpu_s, abs=1e-3)
        assert got[key]["fraction"] == pytest.approx(fraction, abs=1e-4)
        assert got[key]["cores"] == CORES and got[key]["host"] == "local"
    assert got["sender-00"]["fraction"] == pytest.approx(0.3, abs=2e-3)
    # brokers: from the earlier start to the later end of the two roles' periods
    send = reference.period(run.run_dir, "sender", run.warmup_end_ms)
    recv = reference.period(run.run_dir, "receiver", run.warmup_end_ms)
    lo, hi = min(send.start_ms, recv.start_ms), max(send.end_ms, recv.end_ms)
    cpu_s, broker_fraction = reference.node_cpu(
        [layout.broker_dir(run.run_dir, 1) / layout.CPU], lo, hi, CORES
    )
    assert got["broker-01"]["cpu_s"] == pytest.approx(cpu_s, abs=1e-3)
    assert got["broker-01"]["fraction"] == pytest.approx(broker_fraction, abs=1e-4)
    [host] = section["hosts"]
    assert host["host"] == "local" and host["client_nodes"] == 3
    assert host["brokers_fraction"] == pytest.approx(3 * 0.3 / CORES, abs=2e-3)
    assert section["shared_cores"] is True
    assert section["client_bound"] is False and section["receivers_behind"] is False
    assert section["client_bound_why"] == [] and section["unknown"] == {}


def test_a_client_node_over_90_percent_of_its_cores_marks_the_run_client_bound(
    tmp_path: Path,
) -> None:
    run = write_synthetic_run(tmp_path, SyntheticSpec())
    add_cpu(run, {"sender": 1.9, "receiver": 0.02})
    section = summarized(run)
    assert section["client_bound"] is True
    assert section["client_bound_why"] == ["sender-00 used 95 % of its 2 cores"]
    assert section["client_cpu_max"] == pytest.approx(expected_node(run, "sender", 0)[1], abs=1e-4)
    # every place that shows the run says so
    report = report_run(run.run_dir).read_text()
    assert "Marked **client-bound**" in report
    assert "**Client-bound:** sender-00 used 95 % of its 2 cores." in report
    [listed] = listing.list_runs(run.run_dir.parent)
    columns, [cells] = listing.table([listing.row(listed)])
    assert cells[columns.index("Marks")] == "client-bound"
    runs = json.loads(json.dumps(read_json(run.run_dir / layout.SUMMARY)["saturation"]))
    assert saturation.marks(runs) == ["client-bound"]
    import pyarrow.parquet as pq

    [row] = pq.read_table(run.run_dir.parent / ".catalog" / "runs.parquet").to_pylist()
    assert row["client_bound"] is True and row["receivers_behind"] is False
    # and the site: a flag on the index, the report's section on the run's page
    from mqlab.report.site import write_site

    built = write_site(run.run_dir.parent, run.run_dir.parent.parent / "site")
    index = built.index.read_text()
    assert 'title="sender-00 used 95 % of its 2 cores">client-bound</span>' in index
    page = (built.index.parent / "runs" / run.run_id / "index.html").read_text()
    assert "<h2>Load generator</h2>" in page
    assert "<strong>Client-bound:</strong> sender-00 used 95 % of its 2 cores." in page


def test_client_nodes_that_share_a_host_are_judged_together(tmp_path: Path) -> None:
    # 2 sender and 2 receiver nodes on one 2-core host, 0.47 cores each: each node 23 %,
    # together 94 %
    run = write_synthetic_run(tmp_path, SyntheticSpec(sender_nodes=2, receiver_nodes=2, stalls=()))
    add_cpu(run, {"sender": 0.47, "receiver": 0.47}, brokers=None)
    section = summarized(run)
    assert all(n["fraction"] < 0.25 for n in section["nodes"])
    [host] = section["hosts"]
    assert host["clients_fraction"] == pytest.approx(4 * 0.47 / CORES, abs=3e-3)
    assert host["brokers_fraction"] is None
    assert section["client_bound"] is True
    assert section["client_bound_why"] == [
        "the 4 client nodes on local used 94 % of its 2 cores together"
    ]


def _lag(run: SyntheticRun) -> int:
    """The worst lag of a counts row inside the sender's measured period, from the files."""
    p = reference.period(run.run_dir, "sender", run.warmup_end_ms)
    return max(
        r["lag_ms"]
        for r in reference.counts(run.run_dir, "sender")
        if p.start_ms - 999 <= r["start_ms"] - r["start_ms"] % 1000 < p.end_ms
    )


def test_fixed_rate_senders_behind_their_schedule_mark_the_run_client_bound(
    tmp_path: Path,
) -> None:
    run = write_synthetic_run(tmp_path, EDGE_CASES)  # a 2.5 s stall: senders fall behind
    add_cpu(run, {"sender": 0.1, "receiver": 0.1})
    lag = _lag(run)
    assert lag > saturation.LAG_LIMIT_MS
    section = summarized(run)
    assert section["sender_lag_ms"] == lag
    assert section["client_bound"] is True
    assert section["client_bound_why"] == [
        f"fixed-rate senders fell {lag / 1000:.1f} s behind their schedule"
    ]


def test_lag_while_a_fault_lasts_is_the_fault_s_not_the_client_s(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, EDGE_CASES)
    add_cpu(run, {"sender": 0.1, "receiver": 0.1})
    manifest = read_json(run.run_dir / layout.MANIFEST)
    at = run.go_ms + 9000  # the stall of EDGE_CASES: 9.0 s after go, 2.5 s long
    manifest["faults"] = [
        {"action": "kill_node", "node": 1, "at_ms": at},
        {"action": "restart_node", "node": 1, "at_ms": at + 2500},
    ]
    write_json(run.run_dir / layout.MANIFEST, manifest)
    section = summarized(run)
    assert section["sender_lag_ms"] == 0 and section["client_bound"] is False


def test_a_run_from_before_cpu_was_recorded_has_unknown_cpu_and_no_new_problem(
    tmp_path: Path,
) -> None:
    run = write_synthetic_run(tmp_path, SyntheticSpec())
    summary = summarize_run(run.run_dir)
    section = summary["saturation"]
    assert all(n["fraction"] is None for n in section["nodes"])
    assert set(section["unknown"]) == {"sender-00", "receiver-00", "receiver-01"}
    assert section["client_bound"] is None and saturation.marks(section) == []
    assert section["receivers_behind"] is False
    assert summary["status"] == "complete" and summary["problems"]["missing_files"] == 0
    assert (
        "Not marked (CPU not recorded for every client node)" in report_run(run.run_dir).read_text()
    )


def test_a_missing_cpu_file_is_a_problem_and_leaves_its_node_unknown(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SyntheticSpec())
    add_cpu(run, {"sender": 0.5, "receiver": 0.1}, omit=("workers/receiver-01/cpu.csv",))
    summary = summarize_run(run.run_dir)
    section = summary["saturation"]
    assert summary["problems"]["missing_files"] == 1
    assert "receiver-01" in section["unknown"] and nodes(section)["receiver-01"]["fraction"] is None
    assert nodes(section)["receiver-00"]["fraction"] is not None
    assert section["client_bound"] is None


def test_a_steady_backlog_is_not_behind_and_matches_the_files(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SyntheticSpec())
    add_cpu(run, {"sender": 0.1, "receiver": 0.1})
    section = summarized(run)
    p = reference.period(run.run_dir, "sender", run.warmup_end_ms)
    rows = [
        r for r in reference.timeline(run.run_dir) if p.start_ms - 999 <= r["second_ms"] < p.end_ms
    ]
    b = section["backlog"]
    assert b["seconds"] == len(rows)
    assert (b["start"], b["end"]) == (rows[0]["backlog"], rows[-1]["backlog"])
    assert b["per_s"] == pytest.approx(reference.backlog_trend(rows), abs=0.06)
    assert b["confirmed"] == sum(r["confirmed"] for r in rows)
    assert section["receivers_behind"] is False


def _timeline(confirmed: list[int], received: list[int]) -> list[dict[str, Any]]:
    out, backlog = [], 0
    for i, (c, r) in enumerate(zip(confirmed, received, strict=True)):
        backlog += c - r
        out.append(
            {
                "second_ms": 1000 * i,
                "confirmed": c,
                "received": r,
                "backlog": backlog,
                "sender_lag_ms": 0,
            }
        )
    return out


@pytest.mark.parametrize(
    ("received", "behind"),
    [
        ([1000] * 20, False),  # keeps up
        ([900, 1100] * 10, False),  # keeps up, unevenly
        ([970] * 20, False),  # 3 % behind: the backlog grows 30 a second, under 5 %
        ([940] * 20, True),  # 6 % behind
        ([700] * 4, True),  # a short period, clearly behind (4 s of a short run)
        ([500] * 20, True),  # half the rate: the NATS example
        ([1000] * 10 + [0] * 10, True),  # stopped halfway
    ],
)
def test_receivers_behind_when_the_backlog_grows_through_the_period(
    received: list[int], behind: bool
) -> None:
    rows = _timeline([1000] * len(received), received)
    section = saturation.figures(
        [], {}, rows, {"sender": (0, 20_000), "receiver": (0, 20_000)}, [], False, True
    )
    assert section["receivers_behind"] is behind
    b = section["backlog"]
    assert b["per_s"] == pytest.approx(reference.backlog_trend(rows), abs=0.06)
    assert b["limit_per_s"] == 50  # 5 % of the 1,000 confirmed a second
    assert b["growth"] == pytest.approx(b["per_s"] * (len(rows) - 1), abs=2)
    if behind:
        assert section["receivers_behind_why"].startswith(
            f"the backlog grew by {b['per_s']:,.0f} messages a second through the measured "
            f"period, from {b['start']:,} to {b['end']:,}"
        )


def test_without_receivers_or_with_one_second_nothing_is_claimed() -> None:
    rows = _timeline([1000] * 5, [0] * 5)
    periods = {"sender": (0, 5000), "receiver": (None, None)}
    assert saturation.figures([], {}, rows, periods, [], False, False)["receivers_behind"] is None
    one = {"sender": (0, 900), "receiver": (0, 900)}
    assert saturation.figures([], {}, rows, one, [], False, True)["receivers_behind"] is None


def _node(role: str, i: int, host: str, used: float | None, cores: int = 2) -> dict[str, Any]:
    """A node as ``cpu_figures`` gives it: ``used`` cores over a 10 s period."""
    return {
        "node": f"{role}-{i:02d}",
        "role": role,
        "host": host,
        "cores": cores,
        "cpu_s": None if used is None else used * 10,
        "period_s": None if used is None else 10.0,
        "fraction": None if used is None else used / cores,
        "processes": 1,
    }


@pytest.mark.parametrize(
    ("receiver", "broker", "shared", "said"),
    [
        (1.9, 0.1, False, "; the receiver nodes' CPU held them (up to 95 % of their cores)"),
        (
            0.95,  # half the node, but all of its one process's interpreter
            0.1,
            False,
            "; receiver-00's processes held them (0.95 cores over 1 process, one interpreter each)",
        ),
        (
            0.3,
            0.5,
            True,  # 0.1 + 0.3 + 3 x 0.5 = 1.9 of the host's 2 cores
            "; host local's CPU held them (95 % of its 2 cores, clients and brokers together)",
        ),
        (0.3, 1.9, False, "; the brokers' CPU held them (up to 95 % of their cores)"),
        (
            0.3,
            0.2,
            False,
            "; not CPU: the receiver nodes used at most 15 % of their cores, the brokers at "
            "most 10 %; each receive waited for the broker's answer (its round trip and "
            "whatever the broker does before it answers, such as a replicated commit)",
        ),
        (
            0.3,
            None,  # the brokers' CPU not recorded (a lab's hosts)
            False,
            "; not CPU: the receiver nodes used at most 15 % of their cores, the brokers' CPU "
            "not recorded; each receive waited for the broker's answer (its round trip and "
            "whatever the broker does before it answers, such as a replicated commit)",
        ),
        (None, 0.2, False, ""),  # a receiver's CPU not known: nothing said of the limit
    ],
)
def test_receivers_behind_says_what_held_them(
    receiver: float | None, broker: float | None, shared: bool, said: str
) -> None:
    nodes = [_node("sender", 0, "local", 0.1), _node("receiver", 0, "local", receiver)]
    nodes += [_node("broker", i, "local" if shared else f"b{i}", broker) for i in range(3)]
    rows = _timeline([1000] * 10, [500] * 10)
    periods = {"sender": (0, 10_000), "receiver": (0, 10_000)}
    section = saturation.figures(nodes, {}, rows, periods, [], shared, True)
    assert section["receivers_behind"] is True
    b = section["backlog"]
    assert section["receivers_behind_why"] == (
        f"the backlog grew by {b['per_s']:,.0f} messages a second through the measured "
        f"period, from {b['start']:,} to {b['end']:,} (receivers took 500 of the 1,000 "
        "msgs/s confirmed)" + said
    )
