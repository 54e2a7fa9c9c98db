"""CONTRIBUTING.md's add-a-broker checklist, kept true: the driver registry, the node
configurations, the images, the profiles, the short scenarios, the contract-suite
targets and the Python dependencies agree about which brokers exist."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

from mqlab.brokers import nodeconf, registry
from tests.integration.drivers.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]
BROKERS = registry.BROKERS
DRIVEN = [b for b in BROKERS.values() if b.driver_module is not None]
LOCAL = [b for b in DRIVEN if b.local_cluster is not None]
CLOUD_ONLY = [b for b in DRIVEN if b.local_cluster is None]  # no server obtainable here


def _profiles() -> dict[str, str]:
    """profile name -> broker, from scenarios/profiles/."""
    out = {}
    for p in sorted((ROOT / "scenarios" / "profiles").glob("*.toml")):
        out[p.stem] = tomllib.loads(p.read_text())["broker"]
    return out


def _python_deps() -> dict[str, str]:
    text = (ROOT / "nix" / "python-deps.nix").read_text()
    return dict(re.findall(r'^\s*([\w.-]+) = \{ role = "([\w-]+)"', text, re.M))


def test_every_driven_broker_has_its_driver_module() -> None:
    for b in DRIVEN:
        module = importlib.import_module(f"mqlab.brokers.{b.driver_module}.driver")
        assert module.DRIVER is registry.driver_class(b.name), b.name
        assert module.DRIVER.client_libraries, f"{b.name}: name the client library"


def test_every_local_broker_has_a_launcher_a_contract_target_and_a_short_scenario() -> None:
    profiles = _profiles()
    local_scenarios: dict[str, list[str]] = {}
    for p in sorted((ROOT / "scenarios").glob("*.toml")):
        raw = tomllib.loads(p.read_text())
        if raw.get("cluster", {}).get("target", "local") == "local" and "profile" in raw:
            local_scenarios.setdefault(profiles[raw["profile"]], []).append(p.name)
    for b in LOCAL:
        module = importlib.import_module(f"mqlab.brokers.{b.local_cluster}.cluster")
        assert module.CLUSTER.broker, b.name
        same = {
            o.name
            for o in LOCAL
            if (o.driver_module, o.local_cluster) == (b.driver_module, b.local_cluster)
        }
        assert any(t.broker in same for t in TARGETS.values()), (
            f"{b.name}: add a Target in tests/integration/drivers/targets.py"
        )
        assert local_scenarios.get(b.name), f"{b.name}: add scenarios/{b.name}-short.toml"


def test_every_driven_broker_without_a_local_server_has_a_cloud_scenario_and_unit_tests(
    tmp_path: Path,
) -> None:
    """No local server, so no contract target and no local short run: its short run is a
    scenario for a lab whose images run it (target "aws"), which validates; its driver's
    own logic has unit tests of its own; and mqlab refuses a local target in one line."""
    from mqlab.errors import ScenarioError
    from mqlab.scenario.load import load_scenario

    profiles = _profiles()
    cloud: dict[str, list[Path]] = {}
    for p in sorted((ROOT / "scenarios").rglob("*.toml")):
        raw = tomllib.loads(p.read_text())
        listed = raw.get("profile")
        for profile in listed if isinstance(listed, list) else [listed]:  # a sweep: a list
            if raw.get("cluster", {}).get("target") == "aws" and profile in profiles:
                cloud.setdefault(profiles[profile], []).append(p)
    for b in CLOUD_ONLY:
        assert b.self_hosted, f"{b.name}: a SaaS broker needs a local emulator (as SQS)"
        assert cloud.get(b.name), f'{b.name}: add a scenario with target = "aws" (scenarios/aws/)'
        for path in cloud[b.name]:
            assert load_scenario(path), path
        assert (ROOT / "tests" / "unit" / "drivers" / f"test_{b.driver_module}.py").is_file(), (
            f"{b.name}: no server runs here; unit-test the driver's own logic in "
            f"tests/unit/drivers/test_{b.driver_module}.py"
        )
        assert not any(t.broker == b.name for t in TARGETS.values()), (
            f"{b.name}: a contract target needs a local server"
        )
        local = tmp_path / f"{b.name}-local.toml"
        text = cloud[b.name][0].read_text()
        local.write_text(text.replace('target = "aws"', 'target = "local"', 1))
        try:
            load_scenario(local)
        except ScenarioError as e:
            assert "has no local cluster" in str(e) and "\n" not in str(e), e
        else:
            raise AssertionError(f"{b.name}: a local run was accepted without a local cluster")


def test_every_profile_names_a_driven_broker_and_every_driven_broker_has_one() -> None:
    profiles = _profiles()
    driven = {b.name for b in DRIVEN}
    assert set(profiles.values()) <= driven, profiles
    assert driven <= set(profiles.values()), driven - set(profiles.values())


def test_self_hosted_brokers_have_an_image_and_a_node_configuration() -> None:
    hosted = set(registry.self_hosted_brokers())
    images = {p.stem for p in (ROOT / "images" / "brokers").glob("*.nix")}
    assert images == hosted
    assert set(nodeconf.BROKERS) == hosted
    assert set(nodeconf.STANDARD_PORTS) == hosted
    for b in hosted:
        assert (ROOT / "mqlab" / "brokers" / b / "node.py").is_file(), b


def test_driver_client_libraries_are_in_the_worker_closure_and_pinned() -> None:
    deps = _python_deps()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = " ".join(pyproject["project"]["dependencies"]).lower()
    lock = (ROOT / "uv.lock").read_text()
    for b in DRIVEN:
        lib = registry.driver_class(b.name).client_libraries[0]
        assert deps.get(lib) == "worker", f"{b.name}: {lib} needs role worker in python-deps.nix"
        assert lib in declared, f"{b.name}: {lib} missing from pyproject.toml"
        assert f'name = "{lib}"' in lock, f"{b.name}: {lib} missing from uv.lock (run uv lock)"


def test_the_checklist_names_each_place() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    for place in [
        "mqlab/brokers/registry.py",
        "mqlab/brokers/",
        "mqlab/brokers/",
        "mqlab/brokers/",
        "images/brokers/",
        "scenarios/profiles/",
        "scenarios/",
        "scenarios/aws/",
        "tests/integration/drivers/targets.py",
        "nix/python-deps.nix",
        "pyproject.toml",
        "scripts/apt-packages.txt",
        "mqlab/published/reference.py",
        "scenarios/aws/",
        "tests/unit/drivers/",
    ]:
        assert place in text, place


def test_every_launcher_is_built_the_way_the_run_builds_it(tmp_path: Path) -> None:
    """run.ClusterPool builds every launcher as cls(workdir, nodes, hosts or None)."""
    from mqlab.errors import ClusterError
    from mqlab.hosts.local import LocalHost
    from mqlab.hosts.ssh import SshHost

    remote = [SshHost(f"broker-{i}", f"10.9.9.{i + 10}", root="/tmp/x") for i in range(3)]
    for b in LOCAL:
        cls = importlib.import_module(f"mqlab.brokers.{b.local_cluster}.cluster").CLUSTER
        assert cls(tmp_path / b.name, 3, None).nodes >= 1, b.name
        assert all(h.is_local for h in cls(tmp_path / b.name, 3, [LocalHost()] * 3).hosts)
        try:
            on_hosts = cls(tmp_path / b.name, 3, remote)
        except ClusterError as e:  # a launcher that runs locally only says so in one line
            assert "\n" not in str(e) and "local" in str(e), (b.name, e)
        else:
            assert [h.name for h in on_hosts.hosts] == [h.name for h in remote[: on_hosts.nodes]]
