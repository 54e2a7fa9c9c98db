"""One home for every broker's node configuration (STYLE.md 13).

``render(node)`` turns a :class:`Node` (which broker, which index, every node's
address and ports, this node's data directory, the lab id and the durability
settings) into the broker's configuration files, file name -> content. The local
launchers (``mqlab/brokers``: every node on 127.0.0.1, ports differ per node) and
the images' boot script (``images/scripts/mqlab_node.py``: one node per host, the
broker's standard ports) both call it, so the two cannot drift apart.

STDLIB ONLY, and no import of the rest of mqlab but the broker folders' descriptors
(``mqlab.brokers.descriptor``: which brokers exist, their standard ports) and their
``node.py`` modules: the images import this package at boot with a bare Python
(``images/base.nix`` ships it next to the script).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import uuid
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from mqlab.brokers import descriptor

LOOPBACK = "127.0.0.1"


@cache
def scan() -> dict[str, descriptor.Broker]:
    """Every broker folder's descriptor (scanned once)."""
    return descriptor.scan()


class NodeConfError(ValueError):
    """The node cannot be rendered: unknown broker, index outside the cluster, bad ports."""


def brokers() -> list[str]:
    """Brokers with a render recipe: the self-hosted broker folders (a ``node.py`` each)."""
    return sorted(b.name for b in scan().values() if b.self_hosted)


def broker_ports(broker: str) -> dict[str, int]:
    """The broker's standard ports (port name -> number), as on a host of its own."""
    try:
        info = scan()[broker]
    except KeyError:
        raise NodeConfError(f"no render recipe for broker {broker!r}") from None
    if not info.self_hosted:
        raise NodeConfError(f"no render recipe for broker {broker!r}")
    return dict(info.ports)


@dataclass(frozen=True)
class Node:
    """One broker node as its configuration sees it.

    ``addresses`` holds every node's address in index order (index 0 is the
    primary or seed); ``ports`` every node's port per port name, in index order.
    ``settings`` are the durability settings baked into an image; local clusters
    pass ``{}`` and get each broker's ``LOCAL_SETTINGS``. Keys ``mqlab.*`` state
    what a profile expects and are never written into a broker's configuration.
    """

    broker: str
    index: int
    addresses: tuple[str, ...]
    ports: dict[str, tuple[int, ...]]
    data_dir: str
    lab_id: str = "local"
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.index < len(self.addresses):
            raise NodeConfError(
                f"node index {self.index} is outside the cluster ({len(self.addresses)} nodes)"
            )
        for name, ports in self.ports.items():
            if len(ports) != len(self.addresses):
                raise NodeConfError(
                    f"port {name!r} lists {len(ports)} ports for {len(self.addresses)} nodes"
                )

    @property
    def nodes(self) -> int:
        return len(self.addresses)

    @property
    def address(self) -> str:
        """This node's own address: the one it binds to and advertises."""
        return self.addresses[self.index]

    def port(self, name: str, index: int | None = None) -> int:
        """Port ``name`` of this node (or of node ``index``)."""
        try:
            ports = self.ports[name]
        except KeyError:
            raise NodeConfError(f"{self.broker}: no {name!r} port given") from None
        return ports[self.index if index is None else index]

    def endpoint(self, name: str, index: int) -> str:
        """``address:port`` of node ``index`` for port ``name``."""
        return f"{self.addresses[index]}:{self.port(name, index)}"

    @property
    def loopback(self) -> bool:
        """Every node on this machine's loopback (a local cluster)."""
        return is_loopback(self.addresses)

    def config_settings(self) -> dict[str, Any]:
        """``settings`` without the ``mqlab.*`` keys (not broker configuration)."""
        return broker_settings(self.settings)


def is_loopback(addresses: tuple[str, ...] | list[str]) -> bool:
    return all(a == LOOPBACK for a in addresses)


def standard_ports(broker: str, nodes: int) -> dict[str, tuple[int, ...]]:
    """The broker's standard ports for ``nodes`` nodes on hosts of their own."""
    return {name: (port,) * nodes for name, port in broker_ports(broker).items()}


def render(node: Node) -> dict[str, str]:
    """File name -> content of ``node``'s broker configuration."""
    if node.broker not in brokers():
        raise NodeConfError(f"no render recipe for broker {node.broker!r}")
    module = importlib.import_module(f"mqlab.brokers.{node.broker}.node")
    files: dict[str, str] = module.render(node)
    return files


# -- shared helpers ---------------------------------------------------------------
def broker_settings(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if not k.startswith("mqlab.")}


def lab_secret(lab_id: str, purpose: str) -> str:
    """A per-lab value all nodes derive alike (cookies, cluster ids). Not a secret:
    the lab's security groups and firewall keep broker ports inside the VPC."""
    return hashlib.sha256(f"mqlab:{lab_id}:{purpose}".encode()).hexdigest()


def kafka_cluster_id(lab_id: str) -> str:
    """A KRaft cluster id (22 characters, base64url) every node derives alike."""
    raw = uuid.uuid5(uuid.NAMESPACE_URL, f"mqlab:{lab_id}").bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def props_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list | tuple):
        return ",".join(str(x) for x in v)
    return str(v)


def props(settings: dict[str, Any]) -> list[str]:
    """Java properties lines ``k=v``, sorted by key."""
    return [f"{k}={props_value(v)}" for k, v in sorted(settings.items())]


def yaml(settings: dict[str, Any]) -> list[str]:
    """Flat YAML lines ``k: <json value>``, sorted by key."""
    return [f"{k}: {json.dumps(v)}" for k, v in sorted(settings.items())]


def lines(text_lines: list[str]) -> str:
    """Lines joined into a file's content (ending with a newline)."""
    return "\n".join(text_lines) + "\n"
