"""`mqlab infra up / status / down` end to end against moto_server (EC2 + STS) on 127.0.0.1.

Every test destroys its lab in a finalizer, also when it fails midway, and then checks
through the EC2 API that nothing tagged with its lab id is left running.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from mqlab.cli.infra import infra
from mqlab.labs.aws import inventory, lifecycle
from mqlab.labs.aws.labs import LabDir, all_labs
from tests.conftest import ctrl_c_able

from .conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SECRET = "mqlab-test-secret-NOT-REAL-0123456789"
OPERATOR = "198.51.100.23/32"
FLAKE_REV = "0f1e2d3c4b5a"


@dataclass
class Lab:
    endpoint: str
    ec2: Any
    ami: str
    scenario: Path
    labs_dir: Path

    def write(self, aws_extra: str = "", senders: int = 1, receivers: int = 2) -> Path:
        self.scenario.write_text(f"""\
format_version = 1
name = "moto-lab"
profile = "nats-r3"

[cluster]
target = "aws"
nodes = 3

[cluster.aws]
region = "eu-west-1"
broker_instance_type = "t3.micro"
client_instance_type = "t3.micro"
ebs_size_gb = 8
operator_cidr = "{OPERATOR}"
flake_rev = "{FLAKE_REV}"
ttl_hours = 1
{aws_extra}

[workload]
message_bytes = 1024
duration_s = 10

[clients]
sender_nodes = {senders}
receiver_nodes = {receivers}
threads = 1
""")
        return self.scenario

    def lab_instances(self, lab_id: str, states: tuple[str, ...] = ("pending", "running")) -> list:
        res = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:mqlab:lab", "Values": [lab_id]},
                {"Name": "instance-state-name", "Values": list(states)},
            ]
        )
        return [i for r in res["Reservations"] for i in r["Instances"]]

    def lab_vpcs(self, lab_id: str) -> list:
        return self.ec2.describe_vpcs(Filters=[{"Name": "tag:mqlab:lab", "Values": [lab_id]}])[
            "Vpcs"
        ]


@pytest.fixture
def lab(moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "MQLAB_TF_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAMQLABTESTDUMMY00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("MQLAB_AWS_ENDPOINT", moto_endpoint)
    monkeypatch.setenv("MQLAB_LABS_DIR", str(tmp_path / "labs"))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "nats-r3.toml").write_text(
        (REPO / "scenarios" / "profiles" / "nats-r3.toml").read_text()
    )
    ec2 = boto3.client("ec2", endpoint_url=moto_endpoint, region_name="eu-west-1")

    def register(rev: str) -> str:
        image = ec2.register_image(
            Name=f"mqlab-nats-{rev}",
            RootDeviceName="/dev/xvda",
            Architecture="x86_64",
            VirtualizationType="hvm",
            BlockDeviceMappings=[{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 8}}],
        )
        ec2.create_tags(
            Resources=[image["ImageId"]],
            Tags=[
                {"Key": "mqlab:broker", "Value": "nats"},
                {"Key": "mqlab:flake-rev", "Value": rev},
                {"Key": "mqlab:nixpkgs-rev", "Value": "nixpkgs-test"},
            ],
        )
        return str(image["ImageId"])

    ami = register(FLAKE_REV)
    register("a-later-build")  # newer image of another revision: must not be picked
    handle = Lab(moto_endpoint, ec2, ami, tmp_path / "moto-lab.toml", tmp_path / "labs")
    try:
        yield handle
    finally:
        # Destroy whatever a (possibly failed) test left, while moto still runs.
        for lab_dir in all_labs():
            if lab_dir.load().state != "destroyed":
                lifecycle.down(lab_dir)
            assert handle.lab_instances(lab_dir.path.name) == []
            assert handle.lab_vpcs(lab_dir.path.name) == []


def _files_text(root: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace")
        for p in root.rglob("*")
        if p.is_file() and "tf-data" not in p.parts
    )


def test_up_status_down(lab: Lab) -> None:
    scenario = str(lab.write())
    runner = CliRunner()
    res = runner.invoke(infra, ["up", scenario])
    assert res.exit_code == 0, res.output
    assert "/hour" in res.output

    (lab_dir,) = all_labs()
    lab_id = lab_dir.path.name
    private_key = lab_dir.path / "id_ed25519"
    assert stat.S_IMODE(private_key.stat().st_mode) == 0o600
    inv = inventory.load(lab_dir.inventory_file)
    assert inv.region == "eu-west-1" and inv.ssh_user == "root" and inv.lab_id == lab_id
    assert [h.private_ip for h in inv.brokers] == ["10.42.0.10", "10.42.0.11", "10.42.0.12"]
    assert (len(inv.senders), len(inv.receivers)) == (1, 2)
    assert all(h.public_ip and h.instance_id.startswith("i-") for h in inv.hosts)

    instances = lab.lab_instances(lab_id)
    assert sorted(i["InstanceId"] for i in instances) == sorted(h.instance_id for h in inv.hosts)
    for i in instances:
        tags = {t["Key"]: t["Value"] for t in i["Tags"]}
        assert tags["Project"] == "mqlab" and tags["mqlab:broker"] == "nats"
        assert tags["mqlab:role"] in ("broker", "sender", "receiver")
        assert tags["mqlab:expires-at"] == inv.expires_at
        assert i["ImageId"] == lab.ami and i["InstanceType"] == "t3.micro"
        assert i["KeyName"] == f"{lab_id}-key"
        assert i.get("MetadataOptions", {}).get("HttpTokens", "required") == "required"
    broker1 = next(i for i in instances if i["PrivateIpAddress"] == "10.42.0.11")
    user_data = base64.b64decode(
        lab.ec2.describe_instance_attribute(InstanceId=broker1["InstanceId"], Attribute="userData")[
            "UserData"
        ]["Value"]
    ).decode()
    assert user_data.startswith("#!/bin/sh\n")
    node = json.loads(user_data.split("<<'MQLAB_NODE_JSON'\n")[1].split("\nMQLAB_NODE_JSON")[0])
    assert node["index"] == 1 and node["peers"] == ["10.42.0.10", "10.42.0.11", "10.42.0.12"]

    (ssh_sg,) = lab.ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [f"{lab_id}-ssh"]}]
    )["SecurityGroups"]
    assert [
        (p["FromPort"], [r["CidrIp"] for r in p["IpRanges"]]) for p in ssh_sg["IpPermissions"]
    ] == [(22, [OPERATOR])]

    res = runner.invoke(infra, ["status", "--json"])
    assert res.exit_code == 0, res.output
    (entry,) = json.loads(res.output)["labs"]
    assert entry["state"] == "up" and entry["resources"] >= 15
    assert entry["inventory"]["brokers"][0]["private_ip"] == "10.42.0.10"

    # A second plan adds and destroys nothing. moto reports no instance-level security
    # groups for instances given an explicit private_ip (the 3 brokers), so they show as
    # in-place updates there; real EC2 shows none.
    res = runner.invoke(infra, ["plan", scenario])
    assert res.exit_code == 0, res.output
    planned = re.search(r"(\d+) to add, (\d+) to change, (\d+) to destroy", res.output)
    assert planned and planned.group(1) == planned.group(3) == "0", res.output
    assert planned.group(2) in ("0", "3"), res.output

    res = runner.invoke(infra, ["down", scenario])
    assert res.exit_code == 0, res.output
    assert lab.lab_instances(lab_id) == []
    assert len(lab.lab_instances(lab_id, ("terminated",))) == 6
    assert lab.lab_vpcs(lab_id) == []
    assert (
        lab.ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [f"{lab_id}-key"]}])[
            "KeyPairs"
        ]
        == []
    )
    assert LabDir.for_id(lab_id).load().state == "destroyed" and not private_key.exists()
    assert "no live labs" in runner.invoke(infra, ["status"]).output

    # Credentials never reach files or printouts.
    assert SECRET not in _files_text(lab.labs_dir)
    assert SECRET not in res.output


def test_failed_up_destroys_what_it_created(lab: Lab) -> None:
    # An AMI that does not exist: the network is created, the instances fail.
    scenario = str(lab.write('ami_id = "ami-0123456789abcdef0"'))
    res = CliRunner().invoke(infra, ["up", scenario])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.startswith("mqlab: error:")]
    assert len(lines) == 1 and "destroyed everything that had been created" in lines[0]
    (lab_dir,) = all_labs()
    assert lab_dir.load().state == "destroyed"
    assert lab.lab_vpcs(lab_dir.path.name) == []
    assert SECRET not in res.output


def test_ctrl_c_during_up_destroys_what_it_created(lab: Lab) -> None:
    scenario = str(lab.write(senders=2, receivers=2))
    # The installed entry point, as a user runs it: `mqlab infra up SCENARIO`.
    cmd = [str(Path(sys.executable).with_name("mqlab")), "infra", "up", scenario]
    proc = subprocess.Popen(
        cmd,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ctrl_c_able,
    )
    try:
        lab_id = ""
        deadline = time.monotonic() + 300  # a guard against hanging, not a timed assertion
        while time.monotonic() < deadline and proc.poll() is None:
            labs = all_labs()
            if labs and lab.lab_vpcs(labs[0].path.name):
                lab_id = labs[0].path.name
                break
            time.sleep(0.5)
        assert lab_id, "up never created the lab's VPC"
        proc.send_signal(signal.SIGINT)  # what Ctrl-C delivers to mqlab
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out + err
    assert "interrupted" in err and "destroyed everything that had been created" in err
    assert lab.lab_vpcs(lab_id) == [] and lab.lab_instances(lab_id) == []
    assert LabDir.for_id(lab_id).load().state == "destroyed"
