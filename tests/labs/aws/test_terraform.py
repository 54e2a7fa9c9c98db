from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.errors import InfraError
from mqlab.labs.aws.terraform import Terraform, scrub

from .conftest import calls


def test_plan_uses_chdir_json_and_detailed_exitcode(fake_terraform: Path, tmp_path: Path) -> None:
    tf = Terraform(tmp_path / "stack", {"FAKE_TF_LOG": str(fake_terraform)})
    events: list[dict[str, object]] = []
    changed, res = tf.plan(tmp_path / "v.json", out=tmp_path / "p", on_event=events.append)
    assert changed is True and res.returncode == 2
    (args,) = calls(fake_terraform)
    assert args[0] == f"-chdir={tmp_path / 'stack'}"
    assert args[1] == "plan" and "-json" in args and "-detailed-exitcode" in args
    assert f"-var-file={tmp_path / 'v.json'}" in args and f"-out={tmp_path / 'p'}" in args
    assert [e["type"] for e in events] == ["planned_change", "change_summary"]


def test_apply_destroy_never_send_removed_flags(fake_terraform: Path, tmp_path: Path) -> None:
    tf = Terraform(tmp_path, {"FAKE_TF_LOG": str(fake_terraform)})
    tf.apply(tmp_path / "p")
    tf.destroy(tmp_path / "v.json")
    apply, destroy = calls(fake_terraform)
    assert "-auto-approve" in apply and "-auto-approve=false" not in apply
    assert "-auto-approve" in destroy and "-force" not in destroy


def test_outputs_returns_values_by_name(fake_terraform: Path, tmp_path: Path) -> None:
    out = Terraform(tmp_path, {"FAKE_TF_LOG": str(fake_terraform)}).outputs()
    assert out["inventory"]["brokers"][0]["private_ip"] == "10.42.0.10"


def test_failure_is_one_infra_error_without_secrets(
    fake_terraform: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    env = {
        "FAKE_TF_LOG": str(fake_terraform),
        "FAKE_TF_FAIL": "apply",
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    with pytest.raises(InfraError) as err:
        Terraform(tmp_path, env).apply(tmp_path / "p")
    assert "apply broke" in str(err.value)
    assert secret not in str(err.value) and "redacted" in str(err.value)


def test_scrub_only_replaces_credential_values() -> None:
    env = {"AWS_SECRET_ACCESS_KEY": "abcdefgh12345678", "AWS_SESSION_TOKEN": "tok-tok-tok-tok"}
    assert scrub("x abcdefgh12345678 y tok-tok-tok-tok", env).count("redacted") == 2


def test_missing_terraform_is_an_infra_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MQLAB_TERRAFORM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InfraError, match="terraform not found"):
        Terraform(tmp_path, {})
