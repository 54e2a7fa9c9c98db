"""``target = "aws"`` for a broker whose launcher is a local stand-in: the attach path
(``mqlab.brokers.image``) checks the nodes the lab's images run and hands them to clients.

As ``test_fleet_aws.py`` does for NATS, a netns lab plays the EC2 lab (its inventory
written where ``mqlab infra up`` writes a lab's: kind ``aws``, a price, the lab's key) and
the test does what the Kafka image does at boot: a Kafka API server on the broker host at
the standard port 9092, started through the host's own start mechanism (``Host.spawn``
over SSH). No Kafka server can run here, so that server is ``tansu`` (the Kafka API
stand-in mqlab uses locally: one node, memory storage), and the scenario is
``scenarios/aws/kafka-short-aws.toml`` with one node and the ``kafka-standin`` profile
(tansu holds one replica). What is real: the lookup of the live lab, SSH with the lab's
key, the image check, health through SSH tunnels (``ss`` on the host, a TCP answer through
the tunnel), Kafka clients following the advertised address (the coordinator on the
lab's bridge reaches it), the shipped worker bundle, and the server left running.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from mqlab.brokers import cluster as base
from mqlab.brokers import image
from mqlab.brokers.redpanda import cluster as tansu
from mqlab.hosts import process
from mqlab.hosts.base import Host
from mqlab.hosts.process import ProcessRecord
from mqlab.labs.aws.labs import spec_from_scenarios
from mqlab.labs.netns import lab as netns_lab
from mqlab.labs.placement import hosts_of
from mqlab.run import sweep
from mqlab.scenario.load import load_scenario
from tests.conftest import processes_mentioning
from tests.labs.awslab import record_live_lab

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "aws" / "kafka-short-aws.toml"
PRICE = 0.5  # USD per hour


@dataclass
class KafkaLab:
    lab_id: str
    scenario: Path
    host: Host
    address: str
    server: ProcessRecord


def _one_node_standin(tmp_path: Path) -> Path:
    """The AWS scenario with one broker node and replication lowered to tansu's one copy."""
    text = SCENARIO.read_text()
    for old, new in (
        ('profile = "kafka-r3"', 'profile = "kafka-standin"'),
        ("nodes = 3", "nodes = 1"),
        ("duration_s = 20", "duration_s = 8"),
        ("warmup_s = 5", "warmup_s = 2"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "kafka-short-aws.toml"
    path.write_text(text)
    return path


_LABS = itertools.count()


@pytest.fixture
def kafka_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KafkaLab]:
    """A live "AWS" lab record whose hosts are netns hosts, with the Kafka API on 9092."""
    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MQLAB_LABS_DIR", str(tmp_path / "labs"))
    scenario = _one_node_standin(tmp_path)
    [s] = load_scenario(scenario)
    spec = spec_from_scenarios([s])
    name = f"awk{os.getpid() % 100000}-{next(_LABS)}"  # one per test: a failed down stays apart
    up = netns_lab.up(name, brokers=1, senders=1, receivers=1)
    host: Host | None = None
    server: ProcessRecord | None = None
    try:
        record_live_lab(up, spec.lab_id, scenario, s, PRICE, tmp_path, monkeypatch)
        # what the Kafka image does at boot: the Kafka API on the host's address, port 9092
        [host], _s, _r = hosts_of(up.inventory)
        url = f"tcp://{host.address}:9092"
        host.mkdir(host.root)
        server = host.spawn(tansu.tansu_command(url), host.root / "tansu.log", cwd=host.root)
        deadline = time.monotonic() + 20
        while not host.listening([9092])[0]:
            assert host.is_alive(server), "tansu exited on the broker host"
            assert time.monotonic() < deadline, "tansu not listening on 9092"
            time.sleep(0.2)
        yield KafkaLab(spec.lab_id, scenario, host, host.address, server)
    finally:
        if host is not None:
            if server is not None and host.is_alive(server):
                host.stop(server)  # by its PID and start time, as the host started it
            host.close()
        netns_lab.down(name)


@pytest.mark.timeout(300)
def test_kafka_short_aws_attaches_to_the_image_server(kafka_lab: KafkaLab, tmp_path: Path) -> None:
    [result] = sweep.execute_files([kafka_lab.scenario], tmp_path / "results")
    assert result.status == "complete", result.end_reason
    manifest = read_json(result.run_dir / "manifest.json")
    summary = read_json(result.run_dir / "summary.json")
    d = summary["delivery"]
    assert d["sent"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    assert manifest["lab"]["kind"] == "aws" and manifest["lab"]["name"] == kafka_lab.lab_id
    assert manifest["cluster"]["brokers_started_by"] == "image"
    assert manifest["cluster"]["coordinator_reach"] == "ssh tunnel"
    assert manifest["cluster"]["nodes_at"] == [
        {"index": 0, "host": "broker-0", "address": kafka_lab.address, "port": 9092}
    ]
    assert manifest["broker"]["server_versions"] == ["kafka image-under-test"]
    assert manifest["broker"]["stand_in"] is None  # attached: the image's server, as on EC2
    hosts = {w["host"] for w in manifest["workers"]}
    assert hosts == {"sender-0", "receiver-0"}, hosts
    assert all("/bundles/" in w["interpreter_prefix"] for w in manifest["workers"])
    # the image's server was checked and left running; no worker is left
    assert kafka_lab.host.is_alive(kafka_lab.server)
    assert process.port_open(kafka_lab.address, 9092)
    assert not processes_mentioning(result.run_dir.name)


@pytest.mark.timeout(120)
def test_attach_health_goes_through_tunnels_and_sees_a_stopped_server(
    kafka_lab: KafkaLab, tmp_path: Path
) -> None:
    """The attach class's health on the lab: every node listening and answering through
    an SSH tunnel; once the server is gone, neither."""
    from mqlab.brokers import local

    cls = local.attach_class("kafka")
    cluster = cls(tmp_path / "attach", 1, [kafka_lab.host])
    tunnels: list[tuple[str, int]] = []

    def reach(address: str, port: int) -> tuple[str, int]:
        tunnels.append((address, port))
        return kafka_lab.host.forward(address, port)

    cluster.reach = reach
    cluster.start()  # attaches: the image check, then health
    assert tunnels == [(kafka_lab.address, 9092)]
    assert cluster.alive() == [True]
    assert cluster.server_versions() == ["kafka image-under-test"]
    kafka_lab.host.stop(kafka_lab.server)
    assert not kafka_lab.host.is_alive(kafka_lab.server)
    h = cluster.health()
    assert not h["healthy"] and h["nodes"][0]["listening"] == {"kafka": False}, h
    # a port nothing listens on, reached through the same kind of tunnel, does not answer
    assert not image.answers(*kafka_lab.host.forward(kafka_lab.address, 9092))
    cluster.stop()
    assert cluster.alive() == [False]


@pytest.mark.timeout(120)
def test_a_lab_built_for_another_broker_is_refused(
    kafka_lab: KafkaLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"broker": "redpanda", "version": "24"}))
    monkeypatch.setattr(base, "IMAGE_INFO", str(other))
    [result] = sweep.execute_files([kafka_lab.scenario], tmp_path / "results")
    assert result.status != "complete"
    assert "broker-0: its image runs 'redpanda', not kafka" in result.end_reason, result.end_reason


@pytest.mark.timeout(240)
def test_a_process_fault_on_the_image_nodes_is_refused(kafka_lab: KafkaLab, tmp_path: Path) -> None:
    """The image's server is not mqlab's process: kill_node stops the run with one line
    and leaves the server running."""
    scenario = kafka_lab.scenario  # the lab's own scenario file (its path names the lab)
    scenario.write_text(
        scenario.read_text() + '\n[[faults]]\nat_s = 2\naction = "kill_node"\nnode = 0\n'
    )
    [result] = sweep.execute_files([scenario], tmp_path / "results")
    assert result.status != "complete"
    assert "kill_node: the lab's images run the kafka nodes, not mqlab" in result.end_reason, (
        result.end_reason
    )
    assert kafka_lab.host.is_alive(kafka_lab.server)
    assert not processes_mentioning(result.run_dir.name)
