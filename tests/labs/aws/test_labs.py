from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlab.cli.checks  # noqa: F401 - registers the checks from above (AWS, published sets)
from mqlab.errors import InfraError
from mqlab.labs.aws.labs import (
    Backend,
    LabDir,
    find_plugin_dir,
    lab_id_for,
    spec_from_scenarios,
)
from mqlab.scenario.load import load_scenario

REPO = Path(__file__).resolve().parents[3]


def test_lab_id_is_stable_and_terraform_safe(tmp_path: Path) -> None:
    a = lab_id_for("My Scenario.v2", tmp_path / "a.toml")
    assert a == lab_id_for("My Scenario.v2", tmp_path / "a.toml")
    assert a != lab_id_for("My Scenario.v2", tmp_path / "b.toml")
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,38}[a-z0-9]", a)
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,38}[a-z0-9]", lab_id_for("x" * 80, tmp_path))


def test_sweep_is_sized_to_its_largest_point() -> None:
    scenarios = load_scenario(REPO / "scenarios" / "aws" / "mqperf-nats-aws.toml")
    spec = spec_from_scenarios(scenarios)
    assert len(scenarios) == 5
    assert (spec.broker_count, spec.sender_count, spec.receiver_count) == (3, 18, 18)
    assert spec.broker_instance_type == spec.client_instance_type == "r5.2xlarge"


def test_tfvars_match_the_stack_variables(write_scenario: Callable[..., Path]) -> None:
    spec = spec_from_scenarios(load_scenario(write_scenario()))
    tfvars = spec.tfvars("2030-01-01T00:00:00Z", "ssh-ed25519 AAAA x", "")
    declared = set(
        re.findall(
            r'^variable "([a-z_]+)"', (REPO / "terraform/stacks/lab/variables.tf").read_text(), re.M
        )
    )
    assert set(tfvars) <= declared
    required = {"lab_id", "broker", "operator_cidr", "expires_at", "ssh_public_key"}
    assert required <= set(tfvars) and tfvars["format_version"] == 1
    assert tfvars["operator_cidr"] == "203.0.113.7/32" and tfvars["sender_count"] == 1


def test_non_aws_target_is_refused(write_scenario: Callable[..., Path]) -> None:
    path = write_scenario()
    path.write_text(path.read_text().replace('target = "aws"', 'target = "local"'))
    with pytest.raises(Exception, match="cluster.target"):
        spec_from_scenarios(load_scenario(path))


def test_backend_local_by_default_and_s3_as_option(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MQLAB_TF_BACKEND", raising=False)
    assert Backend.from_env("lab-1", "eu-west-1").init_config(tmp_path) == {
        "path": str(tmp_path / "terraform.tfstate")
    }
    monkeypatch.setenv("MQLAB_TF_BACKEND", "s3://my-state-bucket/mqlab/labs")
    b = Backend.from_env("lab-1", "eu-west-1")
    assert b.init_config(tmp_path) == {
        "bucket": "my-state-bucket",
        "key": "mqlab/labs/lab-1/terraform.tfstate",
        "region": "eu-west-1",
    }
    monkeypatch.setenv("MQLAB_TF_BACKEND", "gs://nope")
    with pytest.raises(InfraError, match="MQLAB_TF_BACKEND"):
        Backend.from_env("lab-1", "eu-west-1")


def test_prepare_copies_the_stack_and_writes_s3_override(tmp_path: Path) -> None:
    lab = LabDir(tmp_path / "lab")
    lab.prepare(REPO / "terraform", Backend("s3", "b", "k", "eu-west-1"))
    assert (lab.stack_dir / "main.tf").is_file()
    assert (lab.path / "terraform/modules/network/main.tf").is_file()
    assert 'backend "s3"' in (lab.stack_dir / "backend_override.tf").read_text()
    assert not list(lab.path.rglob("*.tftest.hcl"))
    assert (lab.path.stat().st_mode & 0o777) == 0o700


def test_terraform_env_stays_in_the_lab_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TF_LOG", "TRACE")
    env = LabDir(tmp_path).terraform_env()
    assert env["TF_DATA_DIR"].startswith(str(tmp_path))
    assert env["TF_CLI_CONFIG_FILE"].startswith(str(tmp_path))
    assert "TF_LOG" not in env


def test_plugin_dir_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQLAB_TF_PLUGIN_DIR", str(tmp_path))
    with pytest.raises(InfraError, match="MQLAB_TF_PLUGIN_DIR"):
        find_plugin_dir()
    (tmp_path / "registry.terraform.io/hashicorp/aws").mkdir(parents=True)
    assert find_plugin_dir() == tmp_path
