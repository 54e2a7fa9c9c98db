"""``target = "aws"``: the run takes the fleet's path with the live lab's inventory and key.

No AWS here, so a netns lab plays the EC2 lab: its inventory is written where
``mqlab infra up`` writes a lab's (kind ``aws``, a price per hour, the lab's private
key next to it), and the NATS cluster that the broker images start at boot is started
on the broker hosts by this test beforehand (the image's ``/etc/mqlab/broker.json``
is a file of the test). What is real: the scenario file ``scenarios/aws/quickstart-aws.toml``
unchanged, the lookup of the live lab, SSH with the lab's key, the shipped worker
bundle, the coordinator reaching the brokers' addresses only through SSH tunnels,
the check of a cluster mqlab did not start (and leaves running), the cost figures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from mqlab.brokers import cluster as base
from mqlab.brokers.nats.cluster import NatsCluster
from mqlab.labs.aws.labs import spec_from_scenarios
from mqlab.labs.netns import lab as netns_lab
from mqlab.labs.placement import hosts_of
from mqlab.run import sweep
from mqlab.scenario.load import load_scenario
from tests.conftest import processes_mentioning
from tests.labs.awslab import record_live_lab

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "aws" / "quickstart-aws.toml"
PRICE = 0.75  # USD per hour, as `infra up` would record from prices.json


@pytest.fixture
def aws_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, NatsCluster]]:
    """A live "AWS" lab record whose hosts are netns hosts, with NATS already running."""
    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MQLAB_LABS_DIR", str(tmp_path / "labs"))
    [s] = load_scenario(SCENARIO)
    spec = spec_from_scenarios([s])
    name = f"aws{os.getpid() % 100000}"
    up = netns_lab.up(name, brokers=3, senders=1, receivers=2)
    cluster = None
    try:
        # what the broker images do at boot: NATS on every broker host, standard ports
        record_live_lab(up, spec.lab_id, SCENARIO, s, PRICE, tmp_path, monkeypatch)
        brokers, _s, _r = hosts_of(up.inventory)
        cluster = NatsCluster(tmp_path / "image-nats", 3, brokers)
        cluster.start()
        yield spec.lab_id, cluster
    finally:
        if cluster is not None:
            cluster.stop()
            for h in cluster.hosts:
                h.close()
        netns_lab.down(name)


@pytest.mark.timeout(300)
def test_quickstart_aws_runs_on_the_live_lab(
    aws_lab: tuple[str, NatsCluster], tmp_path: Path
) -> None:
    lab_id, image_cluster = aws_lab
    [result] = sweep.execute_files([SCENARIO], tmp_path / "results")
    assert result.status == "complete", result.end_reason
    manifest = read_json(result.run_dir / "manifest.json")
    summary = read_json(result.run_dir / "summary.json")
    d = summary["delivery"]
    assert d["sent"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    lab = manifest["lab"]
    assert (lab["kind"], lab["name"], lab["price_per_hour_usd"]) == ("aws", lab_id, PRICE)
    assert manifest["cluster"]["brokers_started_by"] == "image"
    assert manifest["cluster"]["coordinator_reach"] == "ssh tunnel"
    assert manifest["broker"]["server_versions"] == ["nats image-under-test"]
    hosts = {w["host"] for w in manifest["workers"]}
    assert hosts == {"sender-0", "receiver-0", "receiver-1"}, hosts
    assert all("/bundles/" in w["interpreter_prefix"] for w in manifest["workers"])
    # the cost of the run at the lab's price
    assert summary["cost_usd"] is not None and summary["cost_usd"] > 0, summary["cost_usd"]
    # mqlab checked the image's cluster and left it running; no worker is left
    assert all(image_cluster.alive()) and image_cluster.health()["healthy"]
    assert not processes_mentioning(result.run_dir.name)


@pytest.mark.timeout(120)
def test_a_lab_built_for_another_broker_is_refused(
    aws_lab: tuple[str, NatsCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"broker": "redis", "version": "7"}))
    monkeypatch.setattr(base, "IMAGE_INFO", str(other))
    [result] = sweep.execute_files([SCENARIO], tmp_path / "results")
    assert result.status != "complete"
    assert "broker-0: its image runs 'redis', not nats" in result.end_reason, result.end_reason
