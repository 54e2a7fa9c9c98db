"""The lab's journal (``state.json``): everything is written down *before* it is created,
so that ``down`` removes it all even after ``up`` was killed half-way."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mqlab.errors import FleetError
from mqlab.hosts.process import ProcessRecord
from mqlab.labs.netns.plan import (
    ACCEPTED_VERSIONS,
    ALIAS_PREFIX,
    FORMAT_VERSION,
    LabPlan,
    Netem,
    Shape,
    lab_of_namespace,
    link_prefix,
)

LOG = logging.getLogger(__name__)


# -- the journal ----------------------------------------------------------------------------
class Journal:
    """``state.json``: what the lab is and every thing made for it, written before making it."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path = path
        self.data = data

    @classmethod
    def create(cls, path: Path, plan: LabPlan, netem: Netem) -> Journal:
        data: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "name": plan.name,
            "status": "creating",
            "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "shape": {
                "brokers": plan.shape.brokers,
                "senders": plan.shape.senders,
                "receivers": plan.shape.receivers,
            },
            "netem": {"delay_ms": netem.delay_ms, "jitter_ms": netem.jitter_ms},
            "subnet": str(plan.subnet),
            "coordinator_ip": plan.coordinator_ip,
            "link_prefix": plan.link_prefix,
            "hosts": [
                {"name": h.name, "namespace": h.namespace, "address": h.address, "veth": h.veth}
                for h in plan.hosts
            ],
            "netns": [],
            "links": [],
            "sshd": {},  # host name -> ProcessRecord json, or None while starting
            "files": [],
        }
        journal = cls(path, data)
        journal.save()
        return journal

    @classmethod
    def load(cls, path: Path) -> Journal | None:
        """The journal at ``path``; None when there is none (or it is unreadable: then sweep)."""
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as e:
            LOG.warning("%s: unreadable lab journal (%s); falling back to the name sweep", path, e)
            return None
        if not isinstance(data, dict) or data.get("format_version") not in ACCEPTED_VERSIONS:
            raise FleetError(
                f"{path}: lab journal format_version {data.get('format_version')!r} "
                f"is not one of {ACCEPTED_VERSIONS}"
                if isinstance(data, dict)
                else f"{path}: a lab journal is a JSON object"
            )
        return cls(path, data)

    def save(self) -> None:
        """Atomically and durably: a SIGKILL right after leaves the old or the new file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(self.data, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def _add(self, kind: str, value: str) -> None:
        if value not in self.data[kind]:
            self.data[kind].append(value)
            self.save()

    def will_create_netns(self, ns: str) -> None:
        self._add("netns", ns)

    def will_create_link(self, link: str) -> None:
        self._add("links", link)

    def will_create_file(self, path: Path) -> None:
        self._add("files", str(path))

    def will_start_sshd(self, host: str) -> None:
        self.data["sshd"][host] = None
        self.save()

    def started_sshd(self, host: str, rec: ProcessRecord) -> None:
        self.data["sshd"][host] = rec.to_json()
        self.save()

    def mark_up(self) -> None:
        self.data["status"] = "up"
        self.save()

    @property
    def status(self) -> str:
        return str(self.data.get("status", "creating"))

    @property
    def shape(self) -> Shape:
        s = self.data.get("shape", {})
        return Shape(int(s.get("brokers", 0)), int(s.get("senders", 0)), int(s.get("receivers", 0)))

    @property
    def netem(self) -> Netem:
        n = self.data.get("netem", {})
        return Netem(float(n.get("delay_ms", 0.0)), float(n.get("jitter_ms", 0.0)))

    @property
    def namespaces(self) -> list[str]:
        return [str(ns) for ns in self.data.get("netns", [])]

    @property
    def links(self) -> list[str]:
        return [str(link) for link in self.data.get("links", [])]

    @property
    def files(self) -> list[Path]:
        return [Path(p) for p in self.data.get("files", [])]

    @property
    def sshd_records(self) -> dict[str, ProcessRecord]:
        return {
            host: ProcessRecord.from_json(rec)
            for host, rec in self.data.get("sshd", {}).items()
            if rec is not None
        }


def leftovers(
    name: str,
    journal: Journal | None,
    namespaces: Iterable[str],
    links: Iterable[dict[str, Any]],
) -> tuple[list[str], list[str]]:
    """(namespaces, links) of lab ``name`` that exist now: the journal's plus the name sweep.

    ``namespaces`` are the existing namespace names, ``links`` ``ip -j link`` entries.
    """
    existing_ns = set(namespaces)
    recorded_ns = set(journal.namespaces) if journal else set()
    ns = sorted(n for n in existing_ns if n in recorded_ns or lab_of_namespace(n) == name)
    prefix = link_prefix(name)
    recorded_links = set(journal.links) if journal else set()
    found = []
    for link in links:
        ifname = str(link.get("ifname", ""))
        if (
            ifname in recorded_links
            or ifname.startswith(prefix)
            or link.get("ifalias") == ALIAS_PREFIX + name
        ):
            found.append(ifname)
    return ns, sorted(set(found))
