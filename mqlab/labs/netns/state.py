"""Labs on disk and on this machine: the state dir's lab folders, the machine-wide registry
of which state dir owns each lab name, finding a lab and its status."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mqlab.brokers import local
from mqlab.errors import FleetError
from mqlab.hosts import process
from mqlab.labs.aws import inventory
from mqlab.labs.netns import machine
from mqlab.labs.netns.journal import Journal
from mqlab.labs.netns.plan import (
    ALIAS_PREFIX,
    FORMAT_VERSION,
    INVENTORY_NAME,
    NAME_RE,
    STATE_NAME,
    Lab,
    check_name,
    lab_of_namespace,
)

LOG = logging.getLogger(__name__)

LOCK_PATH = Path("/run/lock/mqlab-netns.lock")
# Which state dir owns each lab name (namespace names are machine-wide; /run goes at reboot,
# like the namespaces): ``<name>.json`` = {"format_version": 1, "name", "lab_dir"}.
REGISTRY_DIR = Path("/run/mqlab-netns")


# -- state on disk --------------------------------------------------------------------------
def labs_root() -> Path:
    return local.state_dir() / "labs"


def lab_dir(name: str) -> Path:
    return labs_root() / name


@contextlib.contextmanager
def labs_lock() -> Iterator[None]:
    """One ``up``/``down`` at a time on this machine: subnets and namespace names are global."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def journal_of(name: str) -> Journal | None:
    return Journal.load(lab_dir(name) / STATE_NAME)


def _registry_entry(name: str) -> Path:
    return REGISTRY_DIR / f"{name}.json"


def claim(name: str) -> None:
    """Record, machine-wide, that this state dir's lab owns ``name`` (before creating it)."""
    REGISTRY_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    entry = {"format_version": FORMAT_VERSION, "name": name, "lab_dir": str(lab_dir(name))}
    _registry_entry(name).write_text(json.dumps(entry) + "\n")


def release(name: str) -> None:
    if foreign_owner(name) is None:
        _registry_entry(name).unlink(missing_ok=True)


def foreign_owner(name: str) -> Path | None:
    """The lab dir of another state dir that holds lab ``name`` (its journal exists), else None.

    Such a lab is never reused, swept or removed from here: only from its own state dir.
    """
    try:
        owner = Path(json.loads(_registry_entry(name).read_text())["lab_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if owner == lab_dir(name) or not (owner / STATE_NAME).is_file():
        return None  # ours, or its state dir is gone: its remains are anyone's to remove
    return owner


def foreign_error(name: str, owner: Path) -> FleetError:
    state = owner.parent.parent
    return FleetError(
        f"lab {name!r} belongs to another state dir ({state}): pick another name, or use it "
        f"there: MQLAB_STATE_DIR={state} mqlab lab down --name {name}"
    )


def list_labs() -> list[str]:
    """This state dir's labs, and labs on this machine whose state dir is gone (orphans).

    Labs of other state dirs that still exist are not listed (``down --all`` leaves them).
    """
    names = set()
    root = labs_root()
    if root.is_dir():
        names |= {p.name for p in root.iterdir() if p.is_dir() and NAME_RE.match(p.name)}
    found: set[str] = set()
    if REGISTRY_DIR.is_dir():
        found |= {p.stem for p in REGISTRY_DIR.glob("*.json")}
    if shutil.which("ip"):
        with contextlib.suppress(FleetError, json.JSONDecodeError):
            found |= {lab for ns in machine.namespaces() if (lab := lab_of_namespace(ns))}
            for link in machine.links():
                alias = str(link.get("ifalias") or "")
                if alias.startswith(ALIAS_PREFIX):
                    found.add(alias[len(ALIAS_PREFIX) :])
    names |= {n for n in found if NAME_RE.match(n) and foreign_owner(n) is None}
    return sorted(names)


# -- find / status --------------------------------------------------------------------------
def is_up(journal: Journal, namespaces: set[str]) -> bool:
    recs = journal.sshd_records
    hosts = journal.data.get("hosts", [])
    return (
        journal.status == "up"
        and (journal.path.parent / INVENTORY_NAME).is_file()
        and all(h["namespace"] in namespaces for h in hosts)
        and all(h["name"] in recs and process.is_alive(recs[h["name"]]) for h in hosts)
    )


def find(name: str) -> Lab | None:
    """The lab if it is fully up (every namespace exists, every sshd alive), else None."""
    check_name(name)
    journal = journal_of(name)
    if journal is None or not is_up(journal, set(machine.namespaces())):
        return None
    path = journal.path.parent / INVENTORY_NAME
    return Lab(name, journal.path.parent, path, inventory.load(path))


def status(name: str) -> dict[str, Any]:
    """What lab ``name`` is and how its hosts are: for ``mqlab lab status``."""
    check_name(name)
    journal = journal_of(name)
    owner = foreign_owner(name) if journal is None else None
    if owner is not None:  # another state dir's lab: show it (read-only)
        journal = Journal.load(owner / STATE_NAME)
    namespaces = set(machine.namespaces()) if shutil.which("ip") else set()
    if journal is None:
        orphans = sorted(ns for ns in namespaces if lab_of_namespace(ns) == name)
        if not orphans and not lab_dir(name).exists():
            labs = ", ".join(list_labs()) or "none"
            raise FleetError(f"no lab named {name!r} (labs here: {labs})")
        return {
            "name": name,
            "dir": str(lab_dir(name)),
            "state": "orphaned (no journal): remove it with `mqlab lab down --name " + name + "`",
            "up": False,
            "inventory": None,
            "subnet": None,
            "coordinator_ip": None,
            "netem": None,
            "hosts": [{"name": ns, "namespace": ns, "namespace_exists": True} for ns in orphans],
        }
    recs = journal.sshd_records
    hosts = []
    for h in journal.data.get("hosts", []):
        rec = recs.get(h["name"])
        hosts.append(
            {
                "name": h["name"],
                "address": h["address"],
                "namespace": h["namespace"],
                "namespace_exists": h["namespace"] in namespaces,
                "sshd_pid": rec.pid if rec else None,
                "sshd_alive": bool(rec and process.is_alive(rec)),
            }
        )
    inv = journal.path.parent / INVENTORY_NAME
    return {
        "name": name,
        "dir": str(journal.path.parent),
        "state": journal.status,
        "up": is_up(journal, namespaces),
        "inventory": str(inv) if inv.is_file() else None,
        "subnet": journal.data.get("subnet"),
        "coordinator_ip": journal.data.get("coordinator_ip"),
        "netem": {"delay_ms": journal.netem.delay_ms, "jitter_ms": journal.netem.jitter_ms},
        "hosts": hosts,
    }
