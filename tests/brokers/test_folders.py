"""Every broker folder is complete (CONTRIBUTING.md's add-a-broker steps): its descriptor,
its driver and client library, its node configuration and image (self-hosted brokers), its
local launcher or the reason there is none, its profile and short scenario, its contract
target and its docs row. The brokers are the folders of ``mqlab/brokers/``: nothing else
lists them."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

from mqlab.brokers import descriptor, nodeconf, registry
from mqlab.brokers.descriptor import Broker

ROOT = Path(__file__).resolve().parents[2]
BROKERS = registry.BROKERS
NAMES = sorted(BROKERS)


def _profiles() -> dict[str, str]:
    """profile name -> broker, from scenarios/profiles/."""
    out = {}
    for p in sorted((ROOT / "scenarios" / "profiles").glob("*.toml")):
        out[p.stem] = tomllib.loads(p.read_text())["broker"]
    return out


def _scenarios(target: str) -> dict[str, list[Path]]:
    """broker -> the scenarios of that cluster target (every folder of scenarios/ but the
    profiles and the published sets' seeds)."""
    profiles = _profiles()
    out: dict[str, list[Path]] = {}
    for p in sorted((ROOT / "scenarios").rglob("*.toml")):
        if "profiles" in p.parts or "seeds" in p.parts:
            continue
        raw = tomllib.loads(p.read_text())
        listed = raw.get("profile")
        for profile in listed if isinstance(listed, list) else [listed]:  # a sweep: a list
            if raw.get("cluster", {}).get("target", "local") == target and profile in profiles:
                out.setdefault(profiles[profile], []).append(p)
    return out


def _python_deps() -> dict[str, str]:
    text = (ROOT / "nix" / "python-deps.nix").read_text()
    return dict(re.findall(r'^\s*([\w.-]+) = \{ role = "([\w-]+)"', text, re.M))


def test_the_folders_are_the_brokers() -> None:
    folders = [p.parent.name for p in (ROOT / "mqlab" / "brokers").glob("*/__init__.py")]
    assert sorted(folders) == descriptor.folders() == NAMES
    for name, b in BROKERS.items():
        assert isinstance(b, Broker) and b.name == name and b.title and b.local_note, name


@pytest.mark.parametrize("name", NAMES)
def test_the_driver_and_its_client_library(name: str) -> None:
    b = BROKERS[name]
    assert b.driver_module in BROKERS, f"{name}: driver_module names no broker folder"
    module = importlib.import_module(f"mqlab.brokers.{b.driver_module}.driver")
    assert module.DRIVER is registry.driver_class(name)
    if not module.DRIVER.client_libraries:  # its own wire client (artemis: STOMP)
        return
    lib = module.DRIVER.client_libraries[0]
    assert _python_deps().get(lib) == "worker", f"{name}: {lib} needs role worker in python-deps"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert lib in " ".join(pyproject["project"]["dependencies"]).lower(), f"{name}: pyproject"
    assert f'name = "{lib}"' in (ROOT / "uv.lock").read_text(), f"{name}: run uv lock"


@pytest.mark.parametrize("name", NAMES)
def test_a_self_hosted_broker_has_its_node_configuration_ports_and_image(name: str) -> None:
    b = BROKERS[name]
    image = ROOT / "images" / "brokers" / f"{name}.nix"
    if not b.self_hosted:  # SaaS: no nodes of ours
        assert not image.exists() and not b.ports and b.attach is None, name
        return
    assert callable(importlib.import_module(f"mqlab.brokers.{name}.node").render), name
    assert b.ports and name in nodeconf.brokers(), name
    assert image.is_file(), f"{name}: add images/brokers/{name}.nix"
    if b.attach is not None:  # the attach path names ports the image opens
        assert {b.attach.client, *b.attach.running, *b.attach.node_ports} <= set(b.ports)


def test_the_images_are_the_self_hosted_brokers() -> None:
    images = sorted(p.stem for p in (ROOT / "images" / "brokers").glob("*.nix"))
    assert images == registry.self_hosted_brokers() == nodeconf.brokers()


@pytest.mark.parametrize("name", NAMES)
def test_a_profile_and_a_short_scenario(name: str, tmp_path: Path) -> None:
    """A local broker: a local scenario runs it. No local server: its short run is a scenario
    for a lab whose images run it (target "aws"), which validates, and a local target is
    refused in one line."""
    from mqlab.errors import ScenarioError
    from mqlab.scenario.load import load_scenario

    assert name in _profiles().values(), f"{name}: add scenarios/profiles/<profile>.toml"
    if BROKERS[name].local_cluster is not None:
        assert _scenarios("local").get(name), f"{name}: add scenarios/{name}-short.toml"
        return
    cloud = _scenarios("aws").get(name)
    assert cloud, f'{name}: add a scenario with target = "aws" (scenarios/aws/)'
    for path in cloud:
        assert load_scenario(path), path
    local = tmp_path / f"{name}-local.toml"
    local.write_text(cloud[0].read_text().replace('target = "aws"', 'target = "local"', 1))
    with pytest.raises(ScenarioError) as e:
        load_scenario(local)
    assert "has no local cluster" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", NAMES)
def test_a_local_launcher_or_the_reason_there_is_none(name: str, tmp_path: Path) -> None:
    """run.ClusterPool builds every launcher as cls(workdir, nodes, hosts or None)."""
    from mqlab.errors import ClusterError
    from mqlab.hosts.local import LocalHost
    from mqlab.hosts.ssh import SshHost

    b = BROKERS[name]
    if b.local_cluster is None:
        assert b.self_hosted, f"{name}: a SaaS broker needs a local emulator (as SQS)"
        assert b.local_note.startswith("no local server"), f"{name}: say why in local_note"
        return
    assert b.local_cluster in BROKERS, f"{name}: local_cluster names no broker folder"
    cls = importlib.import_module(f"mqlab.brokers.{b.local_cluster}.cluster").CLUSTER
    assert cls.broker, name
    remote = [SshHost(f"broker-{i}", f"10.9.9.{i + 10}", root="/tmp/x") for i in range(3)]
    assert cls(tmp_path / name, 3, None).nodes >= 1, name
    assert all(h.is_local for h in cls(tmp_path / name, 3, [LocalHost()] * 3).hosts)
    try:
        on_hosts = cls(tmp_path / name, 3, remote)
    except ClusterError as e:  # a launcher that runs locally only says so in one line
        assert "\n" not in str(e) and "local" in str(e), (name, e)
    else:
        assert [h.name for h in on_hosts.hosts] == [h.name for h in remote[: on_hosts.nodes]]


@pytest.mark.parametrize("name", NAMES)
def test_a_contract_target_or_unit_tests_of_the_driver(name: str) -> None:
    """A local server: the contract suite runs against it (a broker that shares another's
    driver and launcher, as Redpanda Kafka's, shares its target). None: the driver's own
    logic is unit-tested in its test folder."""
    b = BROKERS[name]
    if b.local_cluster is None:
        assert not b.contract, f"{name}: a contract target needs a local server"
        tests = ROOT / "tests" / "brokers" / name
        assert any(tests.glob("test_*.py")), f"{name}: unit-test the driver in {tests}"
        return
    same = [
        o
        for o in BROKERS.values()
        if (o.driver_module, o.local_cluster) == (b.driver_module, b.local_cluster)
    ]
    assert any(o.contract for o in same), f"{name}: declare a Contract in its descriptor"
    names = [c.name for o in BROKERS.values() for c in o.contract]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("name", NAMES)
def test_a_docs_row(name: str) -> None:
    """docs/brokers.md's table has a row for it, and the README's table names it."""
    title = BROKERS[name].title
    rows = [line for line in (ROOT / "docs" / "brokers.md").read_text().splitlines()]
    assert any(line.startswith(f"| {title} |") for line in rows), f"{name}: docs/brokers.md"
    assert title.split(" ")[-1] in (ROOT / "README.md").read_text(), f"{name}: README.md"


def test_contributing_names_each_step() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text[text.index("## Adding a broker") :]
    steps = re.findall(r"^\d+\. ", section.split("\n## ")[0], re.M)
    assert len(steps) <= 5, steps
    for place in [
        "mqlab/brokers/",
        "mqlab/brokers/descriptor.py",
        "nix/python-deps.nix",
        "pyproject.toml",
        "scenarios/profiles/",
        "images/brokers/",
        "docs/brokers.md",
    ]:
        assert place in section, place
