"""Integration fixtures of the AWS lab: terraform, the provider mirror, moto_server."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqlab.labs.aws.labs import find_plugin_dir

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def terraform_bin() -> str:
    exe = os.environ.get("MQLAB_TERRAFORM") or shutil.which("terraform")
    assert exe, "terraform (>= 1.11) must be installed for the infra integration tests"
    return exe


@pytest.fixture(scope="session")
def plugin_dir() -> Path:
    found = find_plugin_dir()
    assert found is not None, (
        "no offline AWS provider mirror found: set MQLAB_TF_PLUGIN_DIR to a directory holding "
        "registry.terraform.io/hashicorp/aws/5.100.0/linux_amd64"
    )
    return found


@pytest.fixture
def tf_env(tmp_path: Path) -> dict[str, str]:
    """Terraform's environment for a test: CLI config and data dir in tmp, never in $HOME."""
    rc = tmp_path / "terraformrc"
    rc.write_text("disable_checkpoint = true\n")
    env = dict(os.environ)
    env.update(TF_CLI_CONFIG_FILE=str(rc), CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    """A moto_server (EC2 + STS emulator) on 127.0.0.1, stopped afterwards."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
