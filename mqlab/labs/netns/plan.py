"""A lab's plan: names, addresses, the subnet it takes, its hosts' sshd configuration and
the inventory that mqlab reaches them by; no system call."""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.errors import FleetError
from mqlab.labs.aws import keys
from mqlab.labs.aws.inventory import Host, Inventory

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 1
ACCEPTED_VERSIONS = (1,)
STATE_NAME = "state.json"
INVENTORY_NAME = "inventory.json"
KNOWN_HOSTS_NAME = "known_hosts"

SUBNET_POOLS = (ipaddress.IPv4Network("10.213.0.0/16"), ipaddress.IPv4Network("172.29.0.0/16"))
HOST_OFFSET = 10  # host n gets .10+n; .1 is the coordinator (the bridge)
MAX_HOSTS = 200
NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$")
NS_PREFIX = "mqlab-"
NS_RE = re.compile(r"^mqlab-(?P<lab>.+)-(?P<host>(?:broker|sender|receiver)-\d+)$")
ALIAS_PREFIX = "mqlab-lab:"
INNER_DEV = "eth0"  # the host's interface, inside its namespace
SSH_PORT = 22

SSHD = "/usr/sbin/sshd"
PACKAGES = {
    "ip": "iproute2",
    "tc": "iproute2",
    "ssh-keygen": "openssh-client",
    SSHD: "openssh-server",
}
ROOT_MESSAGE = (
    "mqlab lab needs root (network namespaces, links and an sshd per host): run it as root"
)
CMD_TIMEOUT_S = 30.0
SSHD_READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0
KILL_WAIT_S = 3.0

ROLES = (("broker", "brokers"), ("sender", "senders"), ("receiver", "receivers"))


def quiet(_: str) -> None:
    """The default progress callback: says nothing."""


@dataclass(frozen=True)
class Lab:
    name: str
    dir: Path
    inventory_path: Path
    inventory: Inventory


@dataclass(frozen=True)
class Shape:
    brokers: int
    senders: int
    receivers: int

    def describe(self) -> str:
        return f"{self.brokers} brokers, {self.senders} senders, {self.receivers} receivers"


@dataclass(frozen=True)
class Netem:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0

    def describe(self) -> str:
        if not self.delay_ms:
            return "no netem"
        return f"netem delay {self.delay_ms:g} ms jitter {self.jitter_ms:g} ms"

    def tc_args(self) -> list[str]:
        args = ["netem", "delay", f"{self.delay_ms:g}ms"]
        if self.jitter_ms:
            args.append(f"{self.jitter_ms:g}ms")
        return args


@dataclass(frozen=True)
class HostPlan:
    role: str
    index: int
    name: str  # broker-0
    namespace: str  # mqlab-<lab>-broker-0
    address: str  # 10.213.N.10+n
    veth: str  # the root namespace's end of the pair (in the bridge)


@dataclass(frozen=True)
class LabPlan:
    name: str
    shape: Shape
    subnet: ipaddress.IPv4Network
    link_prefix: str
    hosts: tuple[HostPlan, ...]

    @property
    def bridge(self) -> str:
        return f"{self.link_prefix}br"

    @property
    def coordinator_ip(self) -> str:
        return str(self.subnet.network_address + 1)


# -- names and addresses (pure) ------------------------------------------------------------
def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise FleetError(
            f"lab name {name!r} is not valid: 1-32 lowercase letters, digits and inner '-'"
        )


def link_prefix(name: str) -> str:
    """Short, stable prefix of the lab's link names (interface names are at most 15 chars)."""
    return "mq" + hashlib.sha256(name.encode()).hexdigest()[:8]


def namespace_name(lab: str, host: str) -> str:
    return f"{NS_PREFIX}{lab}-{host}"


def lab_of_namespace(ns: str) -> str | None:
    """The lab a namespace belongs to, from its name (None: not a lab's namespace)."""
    m = NS_RE.match(ns)
    return m.group("lab") if m else None


def plan_lab(name: str, shape: Shape, subnet: ipaddress.IPv4Network) -> LabPlan:
    prefix = link_prefix(name)
    hosts = []
    n = 0
    for role, attr in ROLES:
        for index in range(getattr(shape, attr)):
            host = f"{role}-{index}"
            hosts.append(
                HostPlan(
                    role=role,
                    index=index,
                    name=host,
                    namespace=namespace_name(name, host),
                    address=str(subnet.network_address + HOST_OFFSET + n),
                    veth=f"{prefix}v{n}",
                )
            )
            n += 1
    return LabPlan(name, shape, subnet, prefix, tuple(hosts))


def _networks(entries: Iterable[str]) -> list[ipaddress.IPv4Network]:
    nets = []
    for text in entries:
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(text, strict=False)
            if isinstance(net, ipaddress.IPv4Network):
                nets.append(net)
    return nets


def used_networks(
    routes: list[dict[str, Any]], addrs: list[dict[str, Any]]
) -> list[ipaddress.IPv4Network]:
    """IPv4 networks in use on this machine, from ``ip -j route`` and ``ip -j addr`` output."""
    texts = [str(r.get("dst", "")) for r in routes if r.get("dst") not in (None, "default")]
    for link in addrs:
        for a in link.get("addr_info", []):
            if a.get("family") == "inet" and a.get("local"):
                texts.append(f"{a['local']}/{a.get('prefixlen', 32)}")
    return _networks(texts)


def choose_subnet(
    routes: list[dict[str, Any]], addrs: list[dict[str, Any]], taken: Iterable[str]
) -> ipaddress.IPv4Network:
    """The first private /24 of the pools that overlaps no route, address or ``taken`` subnet."""
    used = used_networks(routes, addrs) + _networks(taken)
    for pool in SUBNET_POOLS:
        for candidate in pool.subnets(new_prefix=24):
            if not any(candidate.overlaps(u) for u in used):
                return candidate
    pools = ", ".join(str(p) for p in SUBNET_POOLS)
    raise FleetError(f"no free /24 left in {pools} (routes, addresses or other labs use them)")


def sshd_config(host: HostPlan, lab_dir: Path) -> str:
    d = lab_dir / "sshd" / host.name
    return "\n".join(
        [
            f"# mqlab lab {lab_dir.name}, host {host.name} (namespace {host.namespace})",
            f"ListenAddress {host.address}:{SSH_PORT}",
            f"HostKey {d / 'ssh_host_ed25519_key'}",
            f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {lab_dir / keys.PUBLIC_NAME}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "MaxSessions 200",
            "MaxStartups 200",
            "UseDNS no",
            "PrintMotd no",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def known_hosts_text(host_keys: Iterable[tuple[str, str]]) -> str:
    """known_hosts lines for (address, OpenSSH public key line) pairs (comments dropped)."""
    lines = []
    for address, pub in host_keys:
        kind, blob = pub.split()[:2]
        lines.append(f"{address} {kind} {blob}")
    return "\n".join(lines) + "\n"


def build_inventory(plan: LabPlan, lab_dir: Path, netem: Netem) -> Inventory:
    groups: dict[str, list[Host]] = {role: [] for role, _ in ROLES}
    for h in plan.hosts:
        groups[h.role].append(Host(h.role, h.index, h.address, "", h.namespace))
    return Inventory(
        lab_id=plan.name,
        region="netns",
        ssh_user="root",
        broker="",
        expires_at="",
        brokers=tuple(groups["broker"]),
        senders=tuple(groups["sender"]),
        receivers=tuple(groups["receiver"]),
        ssh_key=lab_dir / keys.PRIVATE_NAME,
        kind="netns",
        ssh_port=SSH_PORT,
        known_hosts=lab_dir / KNOWN_HOSTS_NAME,
        remote_root=str(lab_dir / "hosts" / "default"),
        price_per_hour_usd=None,
        network={
            "delay_ms": netem.delay_ms,
            "jitter_ms": netem.jitter_ms,
            "subnet": str(plan.subnet),
            "coordinator_ip": plan.coordinator_ip,
        },
        remote_roots={h.name: str(lab_dir / "hosts" / h.name) for h in plan.hosts},
    )
