"""Loading scenarios: ``load_scenario(path)`` reads, checks and expands sweeps.

A scenario file names a broker *profile* (durability settings, kept apart in
``profiles/NAME.toml``) and describes cluster, workload and clients. Any scalar
of ``profile``, ``[cluster]``, ``[workload]`` or ``[clients]`` may be a list: the
scenario then expands into one run per combination (a sweep). ``[sweep.zip]``
links lists that vary together (e.g. sender and receiver nodes).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import tomllib
from pathlib import Path
from typing import Any

from mqlab import typed
from mqlab.brokers import registry
from mqlab.errors import ScenarioError
from mqlab.scenario import checks
from mqlab.scenario.model import (
    FORMAT_VERSION,
    Clients,
    Cluster,
    Fault,
    Profile,
    Reference,
    Scenario,
    Workload,
)

SWEEPABLE_SECTIONS = ("cluster", "workload", "clients")
PROJECT_PROFILES = Path(__file__).resolve().parents[2] / "scenarios" / "profiles"


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ScenarioError(path, None, f"{what} file not found", "check the path")
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(path, None, f"TOML syntax error: {e}", "fix the TOML syntax") from None
    except OSError as e:
        raise ScenarioError(path, None, f"cannot read: {e.strerror}") from None


def find_profile(name: str, scenario_path: Path) -> Path:
    """``profiles/NAME.toml`` beside the scenario or in a parent folder, else the project's."""
    if "/" in name or name.endswith(".toml"):
        p = (scenario_path.parent / name).resolve()
        return p
    here = scenario_path.resolve().parent
    for d in [here, *list(here.parents)[:3]]:
        p = d / "profiles" / f"{name}.toml"
        if p.is_file():
            return p
    return PROJECT_PROFILES / f"{name}.toml"


def load_profile(path: Path, referenced_from: Path | None = None) -> Profile:
    if not path.is_file():
        where = referenced_from or path
        known = sorted(p.stem for p in path.parent.glob("*.toml")) if path.parent.is_dir() else []
        raise ScenarioError(
            where,
            "profile",
            f"unknown profile {path.stem!r} ({path} not found)",
            "known profiles: " + (", ".join(known) or "none"),
        )
    raw = _read_toml(path, "profile")
    allowed = {"format_version", "name", "broker", "description", "settings"}
    for key in raw:
        if key not in allowed:
            raise ScenarioError(path, key, "unknown key", "allowed: " + ", ".join(sorted(allowed)))
    _check_format_version(raw, path)
    broker = raw.get("broker")
    if broker not in registry.BROKERS:
        raise ScenarioError(
            path,
            "broker",
            f"unknown broker {broker!r}",
            "one of: " + ", ".join(sorted(registry.BROKERS)),
        )
    try:
        driver = registry.driver_class(broker)
    except (KeyError, ModuleNotFoundError):
        raise ScenarioError(
            path,
            "broker",
            f"broker {broker!r} has no driver yet",
            "brokers with drivers: " + ", ".join(_drivers()),
        ) from None
    settings_table = raw.get("settings", {})
    if not isinstance(settings_table, dict):
        raise ScenarioError(path, "settings", "expected a table", "write [settings]")
    settings: Any = typed.build(driver.Settings, settings_table, path, "settings")
    desc = raw.get("description", "")
    return Profile(
        name=str(raw.get("name", path.stem)),
        broker=broker,
        description=str(desc),
        settings=settings,
        source=path,
    )


def _drivers() -> list[str]:
    out = []
    for name in registry.available_drivers():
        try:
            registry.driver_class(name)
            out.append(name)
        except (KeyError, ModuleNotFoundError):
            pass
    return out


def _check_format_version(raw: dict[str, Any], path: Path) -> None:
    v = raw.get("format_version", FORMAT_VERSION)
    if v != FORMAT_VERSION:
        raise ScenarioError(
            path,
            "format_version",
            f"unsupported version {v!r}",
            f"this mqlab reads format_version = {FORMAT_VERSION}",
        )


def _sweep_axes(raw: dict[str, Any], path: Path) -> list[list[list[tuple[str, Any]]]]:
    """Each axis is a list of alternatives; an alternative is a list of (key, value)."""
    axes: list[list[list[tuple[str, Any]]]] = []
    if isinstance(raw.get("profile"), list):
        axes.append([[("profile", v)] for v in raw["profile"]])
    zipped: dict[str, list[Any]] = {}
    sweep = raw.get("sweep", {})
    if not isinstance(sweep, dict) or set(sweep) - {"zip"}:
        raise ScenarioError(
            path,
            "sweep",
            "only [sweep.zip] is allowed here",
            'e.g. [sweep.zip] "clients.sender_nodes" = [1, 2]',
        )
    zipped = sweep.get("zip", {})
    lengths = set()
    for key, values in zipped.items():
        if not isinstance(values, list) or not values:
            raise ScenarioError(path, f"sweep.zip.{key}", "expected a non-empty list")
        sect, _, name = key.partition(".")
        if sect not in SWEEPABLE_SECTIONS or not name:
            raise ScenarioError(
                path,
                f"sweep.zip.{key}",
                "not a sweepable key",
                "use SECTION.KEY with SECTION one of " + ", ".join(SWEEPABLE_SECTIONS),
            )
        lengths.add(len(values))
    if len(lengths) > 1:
        raise ScenarioError(path, "sweep.zip", "lists of different lengths", "make them equal")
    if zipped:
        n = lengths.pop()
        axes.append([[(k, v[i]) for k, v in zipped.items()] for i in range(n)])
    for sect in SWEEPABLE_SECTIONS:
        table = raw.get(sect, {})
        if not isinstance(table, dict):
            continue
        for key, value in table.items():
            if isinstance(value, list):
                if not value:
                    raise ScenarioError(
                        path, f"{sect}.{key}", "empty list", "give at least one value"
                    )
                axes.append([[(f"{sect}.{key}", v)] for v in value])
    return axes


def load_scenario(path: str | Path) -> list[Scenario]:
    """Read, validate and expand a scenario file: one Scenario per sweep point."""
    path = Path(path)
    raw = _read_toml(path, "scenario")
    allowed = {
        "format_version",
        "name",
        "description",
        "broker",
        "profile",
        "cluster",
        "workload",
        "clients",
        "faults",
        "sweep",
        "reference",
    }
    for key in raw:
        if key not in allowed:
            raise ScenarioError(path, key, "unknown key", "allowed: " + ", ".join(sorted(allowed)))
    _check_format_version(raw, path)
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not name or any(c in name for c in "/\\ _"):
        raise ScenarioError(
            path, "name", f"{name!r} is not a valid name", "use letters, digits, '-' and '.'"
        )
    if "profile" not in raw:
        raise ScenarioError(
            path, "profile", "missing", 'add profile = "NAME" (a file profiles/NAME.toml)'
        )
    axes = _sweep_axes(raw, path)
    points = list(itertools.product(*axes)) if axes else [()]
    out = []
    profiles: dict[str, Profile] = {}
    for point in points:
        concrete = copy.deepcopy(raw)
        concrete.pop("sweep", None)
        varied: dict[str, Any] = {}
        for alternative in point:
            for key, value in alternative:
                varied[key] = value
                if key == "profile":
                    concrete["profile"] = value
                else:
                    sect, _, k = key.partition(".")
                    concrete.setdefault(sect, {})[k] = value
        out.append(_build_one(concrete, path, name, varied, profiles))
    return out


def _build_one(
    raw: dict[str, Any], path: Path, name: str, varied: dict[str, Any], profiles: dict[str, Profile]
) -> Scenario:
    pname = raw["profile"]
    if not isinstance(pname, str):
        raise ScenarioError(path, "profile", f"expected a profile name, got {pname!r}")
    if pname not in profiles:
        profiles[pname] = load_profile(find_profile(pname, path), referenced_from=path)
    profile = profiles[pname]
    broker = raw.get("broker", profile.broker)
    if broker != profile.broker:
        raise ScenarioError(
            path,
            "broker",
            f"{broker!r} does not match profile {pname!r} (broker {profile.broker!r})",
            "remove broker or pick a matching profile",
        )
    cluster = typed.build(Cluster, raw.get("cluster", {}), path, "cluster")
    if "receiver_idle_timeout_s" in raw.get("workload", {}):
        raise ScenarioError(
            path,
            "workload.receiver_idle_timeout_s",
            "removed: receivers now drain until the broker holds nothing (or drain_timeout_s)",
            "delete the line, or write drain_timeout_s = SECONDS for a longest drain",
        )
    workload = typed.build(Workload, raw.get("workload", {}), path, "workload")
    clients = typed.build(Clients, raw.get("clients", {}), path, "clients")
    if clients.threads is not None:
        for k in ("sender_threads", "receiver_threads"):
            if k in raw.get("clients", {}):
                raise ScenarioError(
                    path,
                    f"clients.{k}",
                    "given together with clients.threads",
                    "use either threads or sender_threads/receiver_threads",
                )
        clients = dataclasses.replace(
            clients, sender_threads=clients.threads, receiver_threads=clients.threads, threads=None
        )
    faults_raw = raw.get("faults", [])
    if not isinstance(faults_raw, list):
        raise ScenarioError(path, "faults", "expected an array of tables", "write [[faults]]")
    faults = tuple(typed.build(Fault, f, path, f"faults[{i}]") for i, f in enumerate(faults_raw))
    checks.check_sections(path, cluster, workload, clients, profile, faults)
    reference = _reference(raw.get("reference"), path)
    scenario = Scenario(
        name=name,
        description=str(raw.get("description", "")),
        source=path,
        broker=profile.broker,
        profile=profile,
        cluster=cluster,
        workload=workload,
        clients=clients,
        faults=faults,
        sweep_point=varied,
        reference=reference,
    )
    checks.check_registered(scenario)
    return scenario


def _reference(table: Any, path: Path) -> Reference | None:
    """``[reference]``: a set and one of its experiments (that the set is known and has
    the experiment is checked from above, where the published sets are: see
    :func:`mqlab.scenario.checks.register`)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ScenarioError(path, "reference", "expected a table", "write [reference]")
    return typed.build(Reference, table, path, "reference")


def to_toml(scenario: Scenario) -> str:
    """The scenario as run: one sweep point, the profile resolved inline."""
    doc: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "name": scenario.name,
        "description": scenario.description,
        "broker": scenario.broker,
        "profile": scenario.profile.name,
        "cluster": typed.to_table(scenario.cluster),
        "workload": typed.to_table(scenario.workload),
        "clients": typed.to_table(scenario.clients),
    }
    if scenario.faults:
        doc["faults"] = [typed.to_table(f) for f in scenario.faults]
    if scenario.reference:
        doc["reference"] = typed.to_table(scenario.reference)
    doc["resolved_profile"] = {
        "name": scenario.profile.name,
        "broker": scenario.profile.broker,
        "description": scenario.profile.description,
        "settings": typed.to_table(scenario.profile.settings),
    }
    if scenario.sweep_point:
        doc["sweep_point"] = dict(scenario.sweep_point)
    return dump_toml(doc)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v)} to TOML")


def dump_toml(doc: dict[str, Any], prefix: str = "") -> str:
    lines: list[str] = []
    tables: list[tuple[str, Any]] = []
    for k, v in doc.items():
        key = k if k.replace("_", "").replace("-", "").isalnum() else _toml_value(k)
        if isinstance(v, dict) or isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((key, v))
        else:
            lines.append(f"{key} = {_toml_value(v)}")
    for key, v in tables:
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(v, dict):
            lines.append(f"\n[{full}]")
            lines.append(dump_toml(v, full).rstrip("\n"))
        else:
            for item in v:
                lines.append(f"\n[[{full}]]")
                lines.append(dump_toml(item, full).rstrip("\n"))
    return "\n".join(x for x in lines if x != "") + "\n"
