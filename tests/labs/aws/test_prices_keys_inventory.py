from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import load_ssh_private_key

from mqlab.errors import InfraError
from mqlab.labs.aws import inventory
from mqlab.labs.aws.keys import ensure_key_pair
from mqlab.labs.aws.prices import NodeGroup, estimate, price_table


def test_price_table_says_when_and_where_from() -> None:
    table = price_table()
    assert table["format_version"] == 1
    assert table["recorded"] and "aws.amazon.com" in table["source"]
    assert table["instance_hourly"]["eu-west-1"]["r5.2xlarge"] > 0


def test_mqperf_sized_lab_cost() -> None:
    groups = [
        NodeGroup("broker", 3, "r5.2xlarge"),
        NodeGroup("sender", 18, "r5.2xlarge"),
        NodeGroup("receiver", 18, "r5.2xlarge"),
    ]
    est = estimate("us-east-1", groups, "gp3", 100)
    hourly = price_table()["instance_hourly"]["us-east-1"]["r5.2xlarge"]
    assert est.instances_usd_per_hour == pytest.approx(39 * hourly)
    assert est.ebs_usd_per_hour == pytest.approx(39 * 100 * 0.08 / 730, rel=1e-3)
    assert "/hour" in est.describe()


def test_unknown_price_is_reported_not_guessed() -> None:
    est = estimate("ap-south-1", [NodeGroup("broker", 3, "x9.huge")], "gp3", 10)
    assert est.usd_per_hour is None and "x9.huge in ap-south-1" in est.describe()


def test_key_pair_is_ed25519_and_private_key_0600(tmp_path: Path) -> None:
    private, public = ensure_key_pair(tmp_path, "mqlab-t")
    assert public.startswith("ssh-ed25519 ") and public.endswith(" mqlab-t")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key = load_ssh_private_key(private.read_bytes(), password=None)
    assert type(key).__name__.startswith("Ed25519")
    assert ensure_key_pair(tmp_path, "mqlab-t") == (private, public)  # made once per lab


INV = {
    "format_version": 1,
    "lab_id": "lab-1",
    "region": "eu-west-1",
    "ssh_user": "root",
    "broker": "nats",
    "expires_at": "2030-01-01T00:00:00Z",
    "brokers": [
        {
            "index": i,
            "private_ip": f"10.42.0.{10 + i}",
            "public_ip": f"54.0.0.{i}",
            "instance_id": f"i-{i}",
        }
        for i in range(3)
    ],
    "senders": [{"index": 0, "private_ip": "10.42.0.5", "public_ip": None, "instance_id": "i-s"}],
    "receivers": [],
}


def test_inventory_becomes_typed_hosts(tmp_path: Path) -> None:
    inv = inventory.from_output(INV, tmp_path / "id_ed25519")
    assert [h.name for h in inv.hosts] == ["broker-0", "broker-1", "broker-2", "sender-0"]
    assert inv.brokers[2].private_ip == "10.42.0.12" and inv.senders[0].public_ip == ""
    inventory.save(inv, tmp_path / "inventory.json")
    saved = json.loads((tmp_path / "inventory.json").read_text())
    # format 2 names the key by a path relative to the file (never the key itself)
    assert saved["format_version"] == 2 and saved["ssh_key"] == "id_ed25519"
    assert "PRIVATE KEY" not in json.dumps(saved)
    loaded = inventory.load(tmp_path / "inventory.json")
    assert loaded.hosts == inv.hosts and loaded.ssh_key == tmp_path / "id_ed25519"
    assert INV["format_version"] == 1 and inv.kind == "aws"  # format 1 is still read


def test_inventory_by_hand_for_ssh_hosts(tmp_path: Path) -> None:
    (tmp_path / "hosts.json").write_text(
        json.dumps(
            {
                "format_version": 2,
                "kind": "ssh",
                "lab_id": "mine",
                "ssh_key": "keys/id",
                "known_hosts": "/etc/ssh/known",
                "remote_root": "/srv/mqlab",
                "remote_roots": {"sender-0": "/data/mqlab"},
                "brokers": [{"index": 0, "private_ip": "192.168.1.10"}],
                "senders": [{"index": 0, "private_ip": "192.168.1.20"}],
                "receivers": [{"index": 0, "private_ip": "192.168.1.21", "public_ip": "1.2.3.4"}],
            }
        )
    )
    inv = inventory.load(tmp_path / "hosts.json")
    assert inv.ssh_key == tmp_path / "keys" / "id" and inv.known_hosts == Path("/etc/ssh/known")
    assert (
        inv.root_of(inv.senders[0]) == "/data/mqlab" and inv.root_of(inv.brokers[0]) == "/srv/mqlab"
    )
    assert (
        inv.receivers[0].ssh_address == "1.2.3.4" and inv.brokers[0].ssh_address == "192.168.1.10"
    )
    assert inv.ssh_user == "root" and inv.ssh_port == 22 and inv.price_per_hour_usd is None
    with pytest.raises(InfraError, match="kind"):
        inventory.from_output({"format_version": 2, "kind": "moon", "lab_id": "x"})


def test_inventory_rejects_unknown_version_and_bad_shape() -> None:
    with pytest.raises(InfraError, match="format_version"):
        inventory.from_output({**INV, "format_version": 9})
    with pytest.raises(InfraError, match="malformed"):
        inventory.from_output({**INV, "brokers": [{"index": 0}]})
