"""Helpers for the infra unit tests: scenario files in a temp dir, no network."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROFILE = REPO / "scenarios" / "profiles" / "nats-r3.toml"

BASE = """\
format_version = 1
name = "t-aws"
profile = "nats-r3"

[cluster]
target = "aws"
nodes = {nodes}

[cluster.aws]
{aws}

[workload]
message_bytes = 1024
duration_s = 10

[clients]
sender_nodes = {senders}
receiver_nodes = {receivers}
threads = 2
"""


@pytest.fixture
def write_scenario(tmp_path: Path) -> Callable[..., Path]:
    """Write an AWS scenario (with its profile beside it) and return its path."""
    (tmp_path / "profiles").mkdir(exist_ok=True)
    (tmp_path / "profiles" / "nats-r3.toml").write_text(PROFILE.read_text())

    def write(
        aws: str = 'operator_cidr = "203.0.113.7/32"',
        nodes: int = 3,
        senders: int = 1,
        receivers: int = 2,
        extra: str = "",
        name: str = "t.toml",
    ) -> Path:
        path = tmp_path / name
        text = BASE.format(aws=aws, nodes=nodes, senders=senders, receivers=receivers)
        path.write_text(text + extra)
        return path

    return write


@pytest.fixture
def fake_terraform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point mqlab at the fake terraform; returns the log of its invocations (JSON lines)."""
    import sys

    exe = tmp_path / "terraform"
    exe.write_text(
        f'#!/bin/sh\nexec {sys.executable} {Path(__file__).with_name("fake_terraform.py")} "$@"\n'
    )
    exe.chmod(0o755)
    log = tmp_path / "tf-calls.jsonl"
    log.touch()
    monkeypatch.setenv("MQLAB_TERRAFORM", str(exe))
    monkeypatch.setenv("FAKE_TF_LOG", str(log))
    monkeypatch.setenv("MQLAB_LABS_DIR", str(tmp_path / "labs"))
    monkeypatch.delenv("MQLAB_TF_BACKEND", raising=False)
    monkeypatch.delenv("MQLAB_AWS_ENDPOINT", raising=False)
    return log


def calls(log: Path) -> list[list[str]]:
    import json

    return [json.loads(line) for line in log.read_text().splitlines()]


# the integration tests' fixtures: the real terraform binary, the provider mirror, moto_server
from tests.labs.aws.live import moto_endpoint, plugin_dir, terraform_bin, tf_env  # noqa: E402, F401
