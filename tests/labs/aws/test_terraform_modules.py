"""terraform fmt / validate / test for every module and the root stack, offline."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.integration

DIRS = ["modules/network", "modules/broker_cluster", "modules/client_fleet", "stacks/lab"]


def _tf(exe: str, cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [exe, f"-chdir={cwd}", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of terraform/ so init never writes into the checkout."""
    dest = tmp_path / "terraform"
    shutil.copytree(REPO / "terraform", dest, ignore=shutil.ignore_patterns(".terraform"))
    return dest


def test_fmt_is_clean(terraform_bin: str, tf_env: dict[str, str]) -> None:
    res = _tf(terraform_bin, REPO / "terraform", tf_env, "fmt", "-check", "-recursive", "-diff")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("d", DIRS)
def test_validate_and_test_offline(
    d: str, tree: Path, terraform_bin: str, plugin_dir: Path, tf_env: dict[str, str], tmp_path: Path
) -> None:
    cwd = tree / d
    env = {**tf_env, "TF_DATA_DIR": str(tmp_path / "tf-data")}
    # -lockfile=readonly: the committed lock file must already pin the provider.
    res = _tf(
        terraform_bin,
        cwd,
        env,
        "init",
        "-backend=false",
        "-input=false",
        "-no-color",
        "-lockfile=readonly",
        f"-plugin-dir={plugin_dir}",
    )
    assert res.returncode == 0, res.stdout + res.stderr
    res = _tf(terraform_bin, cwd, env, "validate", "-no-color")
    assert res.returncode == 0 and "valid" in res.stdout, res.stdout + res.stderr
    res = _tf(terraform_bin, cwd, env, "test", "-no-color")
    assert res.returncode == 0, res.stdout + res.stderr
    passed = re.search(r"Success! (\d+) passed, 0 failed", res.stdout)
    assert passed and int(passed.group(1)) >= 5, res.stdout


@pytest.mark.parametrize("d", DIRS)
def test_lock_file_pins_the_provider(d: str) -> None:
    lock = (REPO / "terraform" / d / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/hashicorp/aws"' in lock
    assert 'version     = "5.100.0"' in lock and "h1:" in lock


@pytest.mark.parametrize("d", DIRS)
def test_versions_are_pinned_and_variables_documented(d: str) -> None:
    text = "\n".join(p.read_text() for p in (REPO / "terraform" / d).glob("*.tf"))
    assert 'required_version = "~> 1.11"' in text
    blocks = re.findall(r'variable "(\w+)" \{(.*?)\n\}', text, re.S)
    assert blocks
    for name, body in blocks:
        assert "description" in body, f"{d}: variable {name} has no description"
