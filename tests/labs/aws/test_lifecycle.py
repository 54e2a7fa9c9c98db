from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

import mqlab.cli.checks  # noqa: F401 - registers the checks from above (AWS, published sets)
from mqlab.cli.infra import infra
from mqlab.errors import InfraError
from mqlab.labs.aws import lifecycle
from mqlab.labs.aws.labs import LabDir, LabSpec, spec_from_scenarios
from mqlab.scenario.load import load_scenario

from .conftest import calls


def _spec(write_scenario: Callable[..., Path]) -> LabSpec:
    return spec_from_scenarios(load_scenario(write_scenario()))


def test_up_records_inventory_and_state(
    fake_terraform: Path, write_scenario: Callable[..., Path]
) -> None:
    result = lifecycle.up(_spec(write_scenario))
    assert result.lab.load().state == "up"
    assert result.inventory.brokers[0].private_ip == "10.42.0.10"
    saved = json.loads(result.lab.inventory_file.read_text())
    assert saved["format_version"] == 2 and saved["kind"] == "aws"
    assert saved["price_per_hour_usd"] == result.cost.usd_per_hour
    cmds = [c[1] for c in calls(fake_terraform)]
    assert cmds == ["init", "plan", "apply", "output"]
    tfvars = json.loads(result.lab.tfvars_file.read_text())
    assert tfvars["ssh_public_key"].startswith("ssh-ed25519 ")
    assert "PRIVATE KEY" not in result.lab.tfvars_file.read_text()


@pytest.mark.parametrize("failing", ["apply", "output"])
def test_failed_up_destroys_what_it_created(
    fake_terraform: Path,
    failing: str,
    write_scenario: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_TF_FAIL", failing)
    spec = _spec(write_scenario)
    with pytest.raises(InfraError) as err:
        lifecycle.up(spec)
    assert "destroyed everything that had been created" in str(err.value)
    assert "destroy" in [c[1] for c in calls(fake_terraform)]
    assert LabDir.for_id(spec.lab_id).load().state == "destroyed"


def test_failed_plan_has_nothing_to_undo(
    fake_terraform: Path, write_scenario: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TF_FAIL", "plan")
    spec = _spec(write_scenario)
    with pytest.raises(InfraError) as err:
        lifecycle.up(spec)
    assert "plan broke" in str(err.value) and "nothing had been created" in str(err.value)
    assert "destroy" not in [c[1] for c in calls(fake_terraform)]
    assert LabDir.for_id(spec.lab_id).load().state == "destroyed"


def test_failed_cleanup_says_so(
    fake_terraform: Path, write_scenario: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(write_scenario)
    lifecycle.up(spec)
    monkeypatch.setenv("FAKE_TF_FAIL", "destroy")
    monkeypatch.setattr(
        lifecycle.Terraform,
        "apply",
        lambda self, plan, on_event=None: (_ for _ in ()).throw(KeyboardInterrupt),
    )
    with pytest.raises(lifecycle.LabInterrupted) as err:
        lifecycle.up(spec)
    assert "interrupted" in str(err.value) and "could NOT destroy" in str(err.value)
    assert f"mqlab infra down {spec.lab_id}" in str(err.value)
    assert err.value.exit_code == 130


def test_gc_destroys_only_expired_live_labs(
    fake_terraform: Path, write_scenario: Callable[..., Path]
) -> None:
    old = lifecycle.up(spec_from_scenarios(load_scenario(write_scenario(name="a.toml")))).lab
    young = lifecycle.up(spec_from_scenarios(load_scenario(write_scenario(name="b.toml")))).lab
    old.update(expires_at="2020-01-01T00:00:00Z")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    young.update(expires_at="2030-01-01T00:00:00Z")
    assert [o.action for o in lifecycle.gc(now=now, dry_run=True)] == ["would destroy"]
    assert old.load().state == "up"
    (outcome,) = lifecycle.gc(now=now)
    assert outcome.lab_id == old.path.name and outcome.action == "destroyed"
    assert old.load().state == "destroyed" and young.load().state == "up"
    assert not (old.path / "id_ed25519").exists()
    assert lifecycle.gc(now=now) == []


def test_status_lists_live_labs(fake_terraform: Path, write_scenario: Callable[..., Path]) -> None:
    lab = lifecycle.up(_spec(write_scenario)).lab
    (st,) = lifecycle.status()
    assert st.record.lab_id == lab.path.name and st.resources == 0 and st.inventory is not None
    lifecycle.down(lab)
    assert lifecycle.status() == []
    assert len(lifecycle.status(include_destroyed=True)) == 1


def test_cli_bad_scenario_fails_before_terraform(
    fake_terraform: Path, write_scenario: Callable[..., Path]
) -> None:
    path = write_scenario(aws='operator_cidr = "203.0.113.7/32"\nbroker_instance_type = "big"')
    for cmd in ("plan", "up"):
        res = CliRunner().invoke(infra, [cmd, str(path)])
        assert res.exit_code == 2
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and "cluster.aws.broker_instance_type" in lines[0]
    assert calls(fake_terraform) == []


def test_cli_up_status_down_gc(fake_terraform: Path, write_scenario: Callable[..., Path]) -> None:
    path = str(write_scenario())
    runner = CliRunner()
    res = runner.invoke(infra, ["up", path])
    assert res.exit_code == 0, res.output
    assert "/hour" in res.output and "broker-0" in res.output
    res = runner.invoke(infra, ["status", "--json"])
    doc = json.loads(res.output)
    assert doc["format_version"] == 1 and doc["labs"][0]["state"] == "up"
    res = runner.invoke(infra, ["gc", "--dry-run"])
    assert res.exit_code == 0 and "no expired labs" in res.output
    res = runner.invoke(infra, ["down", path])
    assert res.exit_code == 0 and "destroyed" in res.output
    res = runner.invoke(infra, ["status"])
    assert "no live labs" in res.output
    res = runner.invoke(infra, ["down", "no-such-lab"])
    assert res.exit_code == 2 and "no lab 'no-such-lab'" in res.output


def test_lab_inventory_for_the_fleet(
    fake_terraform: Path, write_scenario: Callable[..., Path]
) -> None:
    spec = _spec(write_scenario)
    with pytest.raises(InfraError, match="no lab"):
        lifecycle.lab_inventory(spec)
    lab = lifecycle.up(spec).lab
    inv = lifecycle.lab_inventory(spec)
    assert inv.ssh_key == lab.path / "id_ed25519" and inv.brokers[0].name == "broker-0"
    lifecycle.down(lab)
    with pytest.raises(InfraError, match="not up"):
        lifecycle.lab_inventory(spec)


def test_mqlab_entry_point_reports_bad_aws_field_in_one_line(
    fake_terraform: Path, write_scenario: Callable[..., Path]
) -> None:
    from mqlab.cli import main

    path = write_scenario(nodes=0)
    res = CliRunner().invoke(main, ["infra", "up", str(path)])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert line.startswith("mqlab: error:") and "cluster.nodes" in line
    assert calls(fake_terraform) == []
