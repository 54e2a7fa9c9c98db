"""The one host list of every multi-host lab: AWS labs, netns labs on this machine, any SSH hosts.

``mqlab infra up`` writes it from the root stack's ``inventory`` output, ``mqlab lab up``
writes it for the namespaces it creates, and a user may write one by hand for hosts
they have (``cluster.target = "ssh"``, ``cluster.inventory = "hosts.json"``).

Format 2 (format 1, written by older ``infra up``, is still read) adds how to reach
the hosts and what the lab is: ``kind``, ``ssh_key``, ``ssh_port``, ``known_hosts``,
``remote_root``, ``price_per_hour_usd`` and ``network`` (netem delay, jitter). Paths
in the file are relative to the file's folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mqlab.errors import InfraError

FORMAT_VERSION = 2
ACCEPTED_VERSIONS = (1, 2)
ROLES = ("broker", "sender", "receiver")
KINDS = ("aws", "netns", "ssh")
DEFAULT_REMOTE_ROOT = "/var/lib/mqlab-fleet"


@dataclass(frozen=True)
class Host:
    role: str  # broker | sender | receiver
    index: int  # position within its role, from 0
    private_ip: str
    public_ip: str  # empty when the node has none
    instance_id: str  # EC2 instance id; the namespace's name on a netns lab

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def ssh_address(self) -> str:
        """Where the coordinator reaches the host: its public address, else its private one."""
        return self.public_ip or self.private_ip


@dataclass(frozen=True)
class Inventory:
    lab_id: str
    region: str
    ssh_user: str
    broker: str
    expires_at: str  # RFC 3339, UTC; empty: never
    brokers: tuple[Host, ...]
    senders: tuple[Host, ...]
    receivers: tuple[Host, ...]
    ssh_key: Path | None = None  # the lab's private key (never copied into results)
    kind: str = "aws"
    ssh_port: int = 22
    known_hosts: Path | None = None  # None: the hosts' keys are accepted on first use
    remote_root: str = DEFAULT_REMOTE_ROOT  # where mqlab keeps bundles and runs on every host
    price_per_hour_usd: float | None = None  # the whole lab's, when it has a price
    network: dict[str, Any] = field(default_factory=dict)  # netem: {"delay_ms", "jitter_ms"}
    remote_roots: dict[str, str] = field(default_factory=dict)  # per host name, overrides

    @property
    def hosts(self) -> tuple[Host, ...]:
        return self.brokers + self.senders + self.receivers

    def root_of(self, host: Host) -> str:
        return self.remote_roots.get(host.name, self.remote_root)

    def to_json(self, base: Path | None = None) -> dict[str, Any]:
        def rel(p: Path | None) -> str | None:
            if p is None:
                return None
            if base is not None:
                try:
                    return str(Path(p).resolve().relative_to(base.resolve()))
                except ValueError:
                    pass
            return str(p)

        return {
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "lab_id": self.lab_id,
            "region": self.region,
            "ssh_user": self.ssh_user,
            "ssh_port": self.ssh_port,
            "ssh_key": rel(self.ssh_key),
            "known_hosts": rel(self.known_hosts),
            "remote_root": self.remote_root,
            "remote_roots": dict(self.remote_roots),
            "broker": self.broker,
            "expires_at": self.expires_at,
            "price_per_hour_usd": self.price_per_hour_usd,
            "network": dict(self.network),
            "brokers": [_host_json(h) for h in self.brokers],
            "senders": [_host_json(h) for h in self.senders],
            "receivers": [_host_json(h) for h in self.receivers],
        }


def _host_json(h: Host) -> dict[str, Any]:
    d = asdict(h)
    d.pop("role")
    return d


def from_output(
    value: dict[str, Any], ssh_key: Path | None = None, base: Path | None = None
) -> Inventory:
    """Build an Inventory from the ``inventory`` output value (or a saved inventory.json).

    ``ssh_key`` overrides the file's; relative paths in the file resolve against ``base``.
    """
    version = value.get("format_version")
    if version not in ACCEPTED_VERSIONS:
        raise InfraError(f"inventory format_version {version!r} is not one of {ACCEPTED_VERSIONS}")

    def path(key: str) -> Path | None:
        v = value.get(key)
        if not v:
            return None
        p = Path(str(v)).expanduser()
        return p if p.is_absolute() or base is None else base / p

    try:
        groups = {
            role: tuple(
                Host(
                    role,
                    int(n["index"]),
                    str(n["private_ip"]),
                    str(n.get("public_ip") or ""),
                    str(n.get("instance_id") or ""),
                )
                for n in value.get(key, [])
            )
            for role, key in (
                ("broker", "brokers"),
                ("sender", "senders"),
                ("receiver", "receivers"),
            )
        }
        kind = str(value.get("kind", "aws"))
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} is not one of {KINDS}")
        price = value.get("price_per_hour_usd")
        return Inventory(
            lab_id=str(value["lab_id"]),
            region=str(value.get("region", "")),
            ssh_user=str(value.get("ssh_user", "root")),
            broker=str(value.get("broker", "")),
            expires_at=str(value.get("expires_at", "")),
            brokers=groups["broker"],
            senders=groups["sender"],
            receivers=groups["receiver"],
            ssh_key=ssh_key or path("ssh_key"),
            kind=kind,
            ssh_port=int(value.get("ssh_port", 22)),
            known_hosts=path("known_hosts"),
            remote_root=str(value.get("remote_root") or DEFAULT_REMOTE_ROOT),
            price_per_hour_usd=None if price is None else float(price),
            network=dict(value.get("network") or {}),
            remote_roots={str(k): str(v) for k, v in (value.get("remote_roots") or {}).items()},
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InfraError(f"inventory output is malformed ({e!r})") from None


def load(path: Path, ssh_key: Path | None = None) -> Inventory:
    """Read a lab's inventory.json."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InfraError(f"{path}: cannot read inventory ({e})") from None
    if not isinstance(data, dict):
        raise InfraError(f"{path}: an inventory is a JSON object")
    try:
        return from_output(data, ssh_key, base=path.parent)
    except InfraError as e:
        raise InfraError(f"{path}: {e}") from None


def save(inv: Inventory, path: Path) -> None:
    path.write_text(json.dumps(inv.to_json(base=path.parent), indent=2) + "\n")
