"""The published mqperf 2021 rows (mqlab/published/data/mqperf-2021.csv): loaded as published,
mapped to mqlab's broker names, matched to a run's threads and nodes, and the notes on
how a run is measured differently. Expected values are read off the CSV by hand."""

from __future__ import annotations

from typing import Any

import pytest

from mqlab.published import base, reference
from mqlab.published.reference import ReferenceRow
from tests.fixtures.committed import committed_runs, copy_committed


@pytest.fixture(scope="module")
def rows() -> list[ReferenceRow]:
    return reference.load_reference("mqperf-2021")


def run(broker: str, st: int, rt: int, sn: int, rn: int, lag: int | None = 0) -> dict[str, Any]:
    return {
        "broker": broker,
        "sender_threads": st,
        "receiver_threads": rt,
        "sender_nodes": sn,
        "receiver_nodes": rn,
        "sender_lag_ms_max": lag,
    }


def test_every_published_row_is_loaded_with_its_figures(rows: list[ReferenceRow]) -> None:
    assert len(rows) == 133
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.system] = counts.get(r.system, 0) + 1
    assert counts == {
        "MongoDB": 6,
        "PostgreSQL": 9,
        "Event Store": 5,
        "SQS": 16,
        "RabbitMQ": 9,
        "NATS Streaming": 11,
        "Redis Streams": 7,
        "Pulsar": 22,
        "Kafka": 21,
        "RedPanda": 6,
        "ActiveMQ Artemis": 11,
        "RocketMQ": 10,
    }
    # line 9 of the CSV: PostgreSQL,main,5,5,1,2,15073.0,15263.0,5738.0,48.0
    assert rows[7] == ReferenceRow(
        "PostgreSQL", "main", "postgres", None, 5, 5, 1, 2, 15073.0, 15263.0, 5738.0, 48.0
    )


def test_every_system_maps_to_a_broker_and_only_nats_and_eventstore_approximately(
    rows: list[ReferenceRow],
) -> None:
    brokers = {r.system: (r.broker, r.approximate) for r in rows}
    assert {s: b for s, (b, _) in brokers.items()} == {
        "MongoDB": "mongodb",
        "PostgreSQL": "postgres",
        "Event Store": "eventstore",
        "SQS": "sqs",
        "RabbitMQ": "rabbitmq",
        "NATS Streaming": "nats",
        "Redis Streams": "redis",
        "Pulsar": "pulsar",
        "Kafka": "kafka",
        "RedPanda": "redpanda",
        "ActiveMQ Artemis": "artemis",
        "RocketMQ": "rocketmq",
    }
    approximate = {s for s, (_, a) in brokers.items() if a}
    assert approximate == {"NATS Streaming", "Event Store"}
    assert "unmapped" not in {a for _, a in brokers.values()}


def test_fell_behind_is_the_60000_ms_marker(rows: list[ReferenceRow]) -> None:
    postgres = [r for r in rows if r.broker == "postgres"]
    # PostgreSQL's 9 rows: 60000 ms in 4 of them (1/1 1s-2r, 1/1 2s-4r, 25/25 2s-4r, 8/8 4s-8r)
    behind = [(r.sender_threads, r.sender_nodes) for r in postgres if r.fell_behind]
    assert behind == [(1, 1), (1, 2), (25, 2), (8, 4)]
    just_below = ReferenceRow("X", "main", "x", None, 1, 1, 1, 2, 1.0, 1.0, 59999.0, 48.0)
    assert not just_below.fell_behind


def test_unknown_reference_names_the_known_ones() -> None:
    with pytest.raises(reference.ReferenceError, match=r"--reference mqperf-2019: unknown.*"):
        reference.load_reference("mqperf-2019")
    with pytest.raises(reference.ReferenceError, match=r"known: mqperf-2021"):
        reference.load_reference("")


def test_matching_rows_need_broker_threads_and_nodes_alike(rows: list[ReferenceRow]) -> None:
    (pg,) = reference.matching_rows(run("postgres", 5, 5, 1, 2), rows)
    assert (pg.send_msgs_per_s, pg.processing_latency_p95_ms) == (15073.0, 5738.0)
    # both Pulsar tables publish 1/1 threads on 4 sender and 8 receiver nodes
    pulsar = reference.matching_rows(run("pulsar", 1, 1, 4, 8), rows)
    assert [(r.table, r.send_msgs_per_s) for r in pulsar] == [
        ("1-partition", 5156.0),
        ("4-partitions", 5248.0),
    ]
    (only,) = reference.matching_rows(run("pulsar", 5, 5, 1, 2), rows)
    assert (only.table, only.send_msgs_per_s) == ("1-partition", 6711.0)
    # Redis Streams publishes 10 sender and 15 receiver threads on 8s-12r
    (redis,) = reference.matching_rows(run("redis", 10, 15, 8, 12), rows)
    assert redis.send_msgs_per_s == 39744.0
    # one figure off: no match
    assert reference.matching_rows(run("redis", 15, 10, 8, 12), rows) == []
    assert reference.matching_rows(run("postgres", 5, 5, 2, 2), rows) == []
    assert reference.matching_rows(run("postgres", 5, 4, 1, 2), rows) == []
    assert reference.matching_rows(run("mqlab", 5, 5, 1, 2), rows) == []
    assert len(reference.broker_rows("rabbitmq", rows)) == 9
    assert reference.broker_rows("mqlab", rows) == []


def test_measurement_notes_only_for_a_run_whose_senders_fell_behind() -> None:
    assert base.measurement_notes(run("nats", 1, 1, 1, 2, lag=0)) == []
    assert base.measurement_notes(run("nats", 1, 1, 1, 2, lag=None)) == []
    assert base.measurement_notes({"broker": "nats"}) == []
    (note,) = base.measurement_notes(run("nats", 1, 1, 1, 2, lag=12345))
    assert note.startswith(
        "this run's senders fell up to 12,345 ms behind their fixed-rate schedule; "
    )
    assert "from each message's intended send time" in note


def test_a_run_whose_scenario_names_mqperf_2021_is_reported_next_to_its_rows(
    tmp_path: Any,
) -> None:
    """The committed quickstart (NATS, 5/5 threads, 1 sender node, 2 receiver nodes) with
    a [reference] added: its report gains the published section, with the CSV's row
    "NATS Streaming,main,5,5,1,2,3976.0,3995.0,142.0,48.0" beside the run's own figures."""
    import json

    from click.testing import CliRunner

    from mqlab.cli import main
    from mqlab.published import base as published
    from mqlab.report.markdown import report_run

    [src] = committed_runs("results/*_quickstart_nats-r3_5t-1s-2r")
    run_dir = copy_committed(src, tmp_path / "results" / src.name)
    scenario = run_dir / "scenario.toml"
    text = scenario.read_text()
    assert "[reference]" not in text and published.of_run(run_dir) is None
    scenario.write_text(text + '\n[reference]\nset = "mqperf-2021"\nexperiment = "main"\n')
    assert published.of_run(run_dir) == ("mqperf-2021", "main")
    report = report_run(run_dir).read_text()
    section = report.split("## Published reference", 1)[1].split("\n## ", 1)[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    sent = summary["throughput"]["send_msgs_per_s"]
    assert "| mqperf-2021 NATS Streaming | 3,976 | 3,995 | 142.0 | 48.0 |" in section
    assert "approximate: NATS Streaming (2021) vs NATS JetStream (mqlab)" in section
    assert f"| mqlab (measured period) | {sent:,.0f} |" in section
    out = CliRunner().invoke(
        main, ["compare", "--reference", "mqperf-1999", str(run_dir)], catch_exceptions=False
    )
    assert out.exit_code != 0 and "unknown published data set" in out.output
    # the site's run page: mqperf 2021 in its own section (once), another set as blocks
    from mqlab.report.site import write_site

    site = write_site(str(tmp_path / "results"), str(tmp_path / "site"))
    page = tmp_path / "site" / "runs" / src.name / "index.html"
    html = page.read_text()
    assert site.runs == 1 and "<h2>Published reference</h2>" not in html
    assert html.count(">3,976<") == 1
    scenario.write_text(
        text + '\n[reference]\nset = "brokers-bench"\nexperiment = "ordered-stream"\n'
    )
    write_site(str(tmp_path / "results"), str(tmp_path / "site"))
    html = page.read_text()
    assert "<h2>Published reference</h2>" in html and "brokers-bench NATS JetStream" in html
    assert ">1,230<" in html  # its published 1230.48 msgs/s
