"""The local stand-ins: tansu (Kafka API, Redpanda's stand-in) and moto (SQS API); and
`mqlab cluster up|status|down` for redis, redpanda, sqs and mongodb."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mqlab import envelope
from mqlab.brokers.base import Delivery
from mqlab.brokers.cluster import LocalCluster
from mqlab.brokers.local import cluster_class
from mqlab.brokers.redpanda.cluster import TansuCluster
from mqlab.brokers.sqs.cluster import SqsCluster
from mqlab.brokers.sqs.driver import Settings as SqsSettings
from mqlab.brokers.sqs.driver import SqsDriver
from mqlab.cli import main
from mqlab.hosts import process
from tests.brokers.group_procs import in_groups

pytestmark = pytest.mark.integration


def test_tansu_answers_as_one_kafka_broker(tmp_path: Path) -> None:
    c = TansuCluster(tmp_path / "cluster", nodes=3)  # always one node
    c.start()
    try:
        assert c.nodes == 1
        assert c.health()["healthy"]
        ep = c.endpoints()
        assert [n.port for n in ep.nodes] == c.ports["kafka"]
        assert ep.extra["stand_in"] is True
        assert c.server_versions()[0].startswith("tansu ")
        assert "stand-in" in c.server_versions()[0]
    finally:
        c.stop()


def test_moto_sqs_redelivers_after_the_visibility_timeout(tmp_path: Path) -> None:
    c = SqsCluster(tmp_path / "cluster")
    c.start()
    try:
        ep = c.endpoints()
        assert ep.extra["dummy_credentials"] is True
        assert "secret" not in json.dumps(ep.to_json()).lower()
        driver = SqsDriver(SqsSettings(visibility_timeout_s=1), ep, "vis-test")
        driver.setup()
        s, r = driver.sender(), driver.receiver()
        sent = envelope.encode_batch(1, 0, 12, time.time_ns(), envelope.PayloadPool(64, seed=4))
        s.send(sent)  # more than one SendMessageBatch call (10 per call)
        first: list[Delivery] = []
        while len(first) < 12:
            first += r.receive(10, 1)
        assert sorted(d.payload for d in first) == sorted(sent)  # binary survives base64
        assert not any(d.redelivered for d in first)
        time.sleep(1.5)
        again: list[Delivery] = []
        deadline = time.monotonic() + 20
        while len(again) < 12 and time.monotonic() < deadline:
            batch = r.receive(10, 1)
            r.ack(batch)
            again += batch
        assert sorted(d.payload for d in again) == sorted(sent)
        assert all(d.redelivered for d in again)
        assert driver.server_versions()[0].startswith("moto ")
        driver.teardown()
    finally:
        c.stop()


# what `cluster status` says beyond health, and how many processes, where a broker says more
STATUS_EXTRA = {"artemis": ('"primary": 0', 3)}


@pytest.mark.parametrize("broker", ["redis", "redpanda", "sqs", "mongodb", "artemis"])
def test_cluster_up_status_down(
    broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "state"))
    runner = CliRunner()
    workdir = tmp_path / "state" / "clusters" / broker
    try:
        up = runner.invoke(main, ["cluster", "up", broker])
        assert up.exit_code == 0, up.output
        state = json.loads((workdir / "state.json").read_text())
        assert state["format_version"] == 1 and state["broker"] == broker
        cluster: LocalCluster = cluster_class(broker).load(workdir)
        records = list(cluster.procs.values())
        assert records and all(process.is_alive(r) for r in records)
        status = runner.invoke(main, ["cluster", "status", broker])
        assert status.exit_code == 0, status.output
        assert '"healthy": true' in status.output
        if broker in STATUS_EXTRA:
            said, processes = STATUS_EXTRA[broker]
            assert said in status.output and len(records) == processes
        down = runner.invoke(main, ["cluster", "down", broker])
        assert down.exit_code == 0, down.output
        assert not [r.pid for r in records if process.is_alive(r)]
        assert in_groups({r.pgid for r in records}) == []
    finally:
        if (workdir / "state.json").is_file():
            cluster_class(broker).load(workdir).stop()
