"""The lab's typed host list, read from the root stack's ``inventory`` output."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mqlab.errors import InfraError

FORMAT_VERSION = 1
ACCEPTED_VERSIONS = (1,)
ROLES = ("broker", "sender", "receiver")


@dataclass(frozen=True)
class Host:
    role: str  # broker | sender | receiver
    index: int  # position within its role, from 0
    private_ip: str
    public_ip: str  # empty when the node has none
    instance_id: str

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass(frozen=True)
class Inventory:
    lab_id: str
    region: str
    ssh_user: str
    broker: str
    expires_at: str  # RFC 3339, UTC
    brokers: tuple[Host, ...]
    senders: tuple[Host, ...]
    receivers: tuple[Host, ...]
    ssh_key: Path | None = None  # the lab's private key (never copied into results)

    @property
    def hosts(self) -> tuple[Host, ...]:
        return self.brokers + self.senders + self.receivers

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "lab_id": self.lab_id,
            "region": self.region,
            "ssh_user": self.ssh_user,
            "broker": self.broker,
            "expires_at": self.expires_at,
            "brokers": [_host_json(h) for h in self.brokers],
            "senders": [_host_json(h) for h in self.senders],
            "receivers": [_host_json(h) for h in self.receivers],
        }


def _host_json(h: Host) -> dict[str, Any]:
    d = asdict(h)
    d.pop("role")
    return d


def from_output(value: dict[str, Any], ssh_key: Path | None = None) -> Inventory:
    """Build an Inventory from the ``inventory`` output value (or a saved inventory.json)."""
    version = value.get("format_version")
    if version not in ACCEPTED_VERSIONS:
        raise InfraError(f"inventory format_version {version!r} is not one of {ACCEPTED_VERSIONS}")
    try:
        groups = {
            role: tuple(
                Host(
                    role,
                    int(n["index"]),
                    str(n["private_ip"]),
                    str(n.get("public_ip") or ""),
                    str(n["instance_id"]),
                )
                for n in value[key]
            )
            for role, key in (
                ("broker", "brokers"),
                ("sender", "senders"),
                ("receiver", "receivers"),
            )
        }
        return Inventory(
            lab_id=str(value["lab_id"]),
            region=str(value["region"]),
            ssh_user=str(value["ssh_user"]),
            broker=str(value["broker"]),
            expires_at=str(value["expires_at"]),
            brokers=groups["broker"],
            senders=groups["sender"],
            receivers=groups["receiver"],
            ssh_key=ssh_key,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InfraError(f"inventory output is malformed ({e!r})") from None


def load(path: Path, ssh_key: Path | None = None) -> Inventory:
    """Read a lab's inventory.json."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InfraError(f"{path}: cannot read inventory ({e})") from None
    return from_output(data, ssh_key)


def save(inv: Inventory, path: Path) -> None:
    path.write_text(json.dumps(inv.to_json(), indent=2) + "\n")
