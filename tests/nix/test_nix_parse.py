"""Every .nix file of the project parses (nix-instantiate --parse), and what the parser
read back says what each file is for: each broker module names its own broker and opens
the ports its rendered configuration uses, the flake has its inputs and outputs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from mqlab.brokers import nodeconf
from mqlab.brokers.registry import self_hosted_brokers

from .conftest import nix_tool

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

NIX_FILES = sorted(
    p.relative_to(REPO)
    for p in REPO.rglob("*.nix")
    if not any(part in (".venv", ".git", "node_modules") for part in p.parts)
)
BROKER_FILES = sorted(p for p in NIX_FILES if p.parent == Path("images/brokers"))


def parse(path: Path) -> str:
    """The expression nix-instantiate read from ``path``, printed back (normalized: one
    line, attribute sets sorted by name)."""
    proc = subprocess.run(
        [nix_tool("nix-instantiate"), "--parse", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), f"{path}: parsed to nothing"
    return proc.stdout


def test_every_self_hosted_broker_has_an_image_module_and_no_other() -> None:
    assert [p.stem for p in BROKER_FILES] == self_hosted_brokers() == nodeconf.brokers()
    names = {str(p) for p in NIX_FILES}
    assert {"flake.nix", "images/base.nix", "images/client.nix"} <= names


@pytest.mark.parametrize("path", NIX_FILES, ids=str)
def test_parses(path: Path) -> None:
    parse(REPO / path)


@pytest.mark.parametrize("path", BROKER_FILES, ids=lambda p: p.stem)
def test_broker_module_names_its_broker_and_opens_its_ports(path: Path) -> None:
    text = parse(REPO / path)
    # one mqlab.node definition, naming the broker of the file name
    # (the printed sets are sorted by attribute name: "broker" comes first)
    assert re.findall(r'mqlab = \{ node = \{ broker = "([^"]*)";', text) == [path.stem]
    # the firewall opens exactly the standard ports the node's configuration is rendered with
    m = re.search(r"\bports = \[ ((?:\(\d+\) )*)\];", text)
    assert m, f"{path}: no ports list"
    ports = sorted(int(p) for p in re.findall(r"\((\d+)\)", m.group(1)))
    assert ports == sorted(nodeconf.broker_ports(path.stem).values())
    # durability settings baked into the image (mongodb also states its member count)
    settings = re.search(r"\bsettings = \{ ([^{}]*) \};", text)
    assert settings and "=" in settings.group(1), f"{path}: no settings"


def test_flake_has_its_pinned_input_and_builds_an_image_per_broker_module() -> None:
    text = parse(REPO / "flake.nix")
    assert re.search(
        r'inputs = \{ nixpkgs = \{ url = "github:NixOS/nixpkgs/[0-9a-f]{40}"; \}', text
    )
    assert "outputs = ({ self, nixpkgs }: " in text
    # the image list is read from images/brokers, so a new module needs no flake edit
    assert "readDir /" in text and text.count("images/brokers") >= 2
    assert "nixosConfigurations = ((lib).genAttrs nodeNames mkNode)" in text


def test_a_syntax_error_does_not_parse(tmp_path: Path) -> None:
    """The check can fail: an unbalanced brace is an error, not an empty expression."""
    good = (REPO / "images/brokers/redis.nix").read_text()
    broken = tmp_path / "broken.nix"
    broken.write_text(good.replace("{", "", 1))
    proc = subprocess.run(
        [nix_tool("nix-instantiate"), "--parse", str(broken)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "error" in proc.stderr
