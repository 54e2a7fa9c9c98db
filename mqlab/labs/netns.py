"""A multi-host lab on this machine: one network namespace and one sshd per host.

``up`` builds a lab of ``broker-N``, ``sender-N`` and ``receiver-N`` hosts that mqlab
reaches over SSH exactly like EC2 instances (same inventory, same Fabric code path):

- one Linux bridge per lab in the root namespace, holding the coordinator's address
  ``.1`` of the lab's private /24 (chosen inside 10.213.0.0/16 so that it overlaps no
  route, no address and no other lab on this machine);
- per host: a namespace ``mqlab-<lab>-<host>`` (``lo`` up, no default route: nothing
  leaves the machine), a veth pair (one end in the bridge, ``eth0`` inside with the
  address ``.10+n``), optionally netem delay on ``eth0``, its own sshd on ``<addr>:22``
  with its own host key, and its own "remote root" directory;
- one ed25519 key pair for the lab, a ``known_hosts`` file and ``inventory.json``.

Everything is journaled in ``state.json`` *before* it is created, so ``down`` removes
it all even after ``up`` was killed half-way; ``down`` also sweeps whatever carries the
lab's names (namespaces, links by name prefix or alias) in case the journal was lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mqlab.brokers import local
from mqlab.errors import FleetError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord
from mqlab.labs.aws import inventory, keys
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
LOCK_PATH = Path("/run/lock/mqlab-netns.lock")
# Which state dir owns each lab name (namespace names are machine-wide; /run goes at reboot,
# like the namespaces): ``<name>.json`` = {"format_version": 1, "name", "lab_dir"}.
REGISTRY_DIR = Path("/run/mqlab-netns")

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


# -- environment checks ---------------------------------------------------------------------
def require_root() -> None:
    if os.geteuid() != 0:
        raise FleetError(ROOT_MESSAGE)


def require_tools(netem: bool) -> None:
    for tool in ["ip", SSHD, "ssh-keygen"] + (["tc"] if netem else []):
        _require_tool(tool)


def _require_tool(tool: str) -> None:
    if shutil.which(tool) is None:
        raise FleetError(
            f"mqlab lab needs `{tool}`: install the Debian package {PACKAGES[tool]} "
            f"(apt-get install {PACKAGES[tool]})"
        )


def _run(cmd: list[str], timeout_s: float = CMD_TIMEOUT_S) -> str:
    """Run ``cmd``; its stdout. Failures become a FleetError naming the command and its stderr."""
    LOG.debug("run: %s", shlex.join(cmd))
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        package = PACKAGES.get(cmd[0], "")
        hint = f": install the Debian package {package}" if package else ""
        raise FleetError(f"`{cmd[0]}` not found{hint}") from None
    except subprocess.TimeoutExpired:
        raise FleetError(f"`{shlex.join(cmd)}` did not finish in {timeout_s:g} s") from None
    if out.returncode != 0:
        err = " ".join(out.stderr.split()) or f"exit code {out.returncode}"
        raise FleetError(f"`{shlex.join(cmd)}` failed: {err}")
    return out.stdout


def _ip_json(*args: str) -> list[dict[str, Any]]:
    text = _run(["ip", "-j", *args]).strip()
    value = json.loads(text) if text else []
    return value if isinstance(value, list) else []


def _namespaces() -> list[str]:
    return [str(n["name"]) for n in _ip_json("netns", "list") if "name" in n]


def _links() -> list[dict[str, Any]]:
    return _ip_json("link", "show")


def _ns_pids(ns: str) -> list[int]:
    try:
        out = _run(["ip", "netns", "pids", ns])
    except FleetError:
        return []  # the namespace is gone
    return [int(p) for p in out.split() if p.isdigit()]


# -- state on disk --------------------------------------------------------------------------
def labs_root() -> Path:
    return local.state_dir() / "labs"


def lab_dir(name: str) -> Path:
    return labs_root() / name


@contextlib.contextmanager
def _labs_lock() -> Iterator[None]:
    """One ``up``/``down`` at a time on this machine: subnets and namespace names are global."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _journal(name: str) -> Journal | None:
    return Journal.load(lab_dir(name) / STATE_NAME)


def _registry_entry(name: str) -> Path:
    return REGISTRY_DIR / f"{name}.json"


def _claim(name: str) -> None:
    """Record, machine-wide, that this state dir's lab owns ``name`` (before creating it)."""
    REGISTRY_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    entry = {"format_version": FORMAT_VERSION, "name": name, "lab_dir": str(lab_dir(name))}
    _registry_entry(name).write_text(json.dumps(entry) + "\n")


def _release(name: str) -> None:
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


def _foreign_error(name: str, owner: Path) -> FleetError:
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
            found |= {lab for ns in _namespaces() if (lab := lab_of_namespace(ns))}
            for link in _links():
                alias = str(link.get("ifalias") or "")
                if alias.startswith(ALIAS_PREFIX):
                    found.add(alias[len(ALIAS_PREFIX) :])
    names |= {n for n in found if NAME_RE.match(n) and foreign_owner(n) is None}
    return sorted(names)


# -- find / status --------------------------------------------------------------------------
def _is_up(journal: Journal, namespaces: set[str]) -> bool:
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
    journal = _journal(name)
    if journal is None or not _is_up(journal, set(_namespaces())):
        return None
    path = journal.path.parent / INVENTORY_NAME
    return Lab(name, journal.path.parent, path, inventory.load(path))


def status(name: str) -> dict[str, Any]:
    """What lab ``name`` is and how its hosts are: for ``mqlab lab status``."""
    check_name(name)
    journal = _journal(name)
    owner = foreign_owner(name) if journal is None else None
    if owner is not None:  # another state dir's lab: show it (read-only)
        journal = Journal.load(owner / STATE_NAME)
    namespaces = set(_namespaces()) if shutil.which("ip") else set()
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
        "up": _is_up(journal, namespaces),
        "inventory": str(inv) if inv.is_file() else None,
        "subnet": journal.data.get("subnet"),
        "coordinator_ip": journal.data.get("coordinator_ip"),
        "netem": {"delay_ms": journal.netem.delay_ms, "jitter_ms": journal.netem.jitter_ms},
        "hosts": hosts,
    }


# -- up -------------------------------------------------------------------------------------
def up(
    name: str,
    brokers: int,
    senders: int,
    receivers: int,
    delay_ms: float = 0.0,
    jitter_ms: float = 0.0,
    progress: Callable[[str], None] = quiet,
) -> Lab:
    """Bring lab ``name`` up (or return it when it is already up with this shape and netem)."""
    check_name(name)
    shape = Shape(brokers, senders, receivers)
    netem = Netem(float(delay_ms), float(jitter_ms))
    if min(brokers, senders, receivers) < 0 or not 1 <= brokers + senders + receivers <= MAX_HOSTS:
        raise FleetError(f"a lab has 1 to {MAX_HOSTS} hosts, not {shape.describe()}")
    if netem.delay_ms < 0 or netem.jitter_ms < 0:
        raise FleetError("delay and jitter are at least 0 ms")
    if netem.jitter_ms and not netem.delay_ms:
        raise FleetError("jitter needs a delay (--delay-ms)")
    require_root()
    require_tools(netem=netem.delay_ms > 0)
    with _labs_lock():
        owner = foreign_owner(name)
        if owner is not None:
            raise _foreign_error(name, owner)
        journal = _journal(name)
        if journal is not None:
            lab = find(name)
            if lab is not None:
                if journal.shape == shape and journal.netem == netem:
                    progress(f"lab {name} is already up")
                    LOG.info("lab %s is already up: reusing it", name)
                    return lab
                raise FleetError(
                    f"lab {name!r} is up with {journal.shape.describe()}, "
                    f"{journal.netem.describe()}; remove it first: mqlab lab down --name {name}"
                )
        old_ns, old_links = leftovers(name, None, _namespaces(), _links())
        if journal is None and (old_ns or old_links):
            raise FleetError(
                f"namespaces or links of a lab named {name!r} exist on this machine, but "
                f"{lab_dir(name)} has no journal of them (remains of a lab whose state dir "
                f"is gone): pick another name, or remove them: mqlab lab down --name {name}"
            )
        if journal is not None or lab_dir(name).exists():
            progress(f"removing what is left of an earlier lab {name}")
            LOG.warning("lab %s: removing the remains of an earlier, incomplete lab", name)
            _teardown(name, journal)
        try:
            _claim(name)
            return _create(name, shape, netem, progress)
        except BaseException:
            LOG.warning("lab %s: up failed; removing what it created", name)
            try:
                _teardown(name, _journal(name))
            except Exception as e:  # keep the first error; say the cleanup failed too
                LOG.error(
                    "lab %s: cleanup failed too (%s): run `mqlab lab down --name %s`", name, e, name
                )
            raise


def _other_labs_subnets(name: str) -> tuple[list[str], set[str]]:
    """Subnets and link prefixes of every other lab: this state dir's and other state dirs'."""
    journals = [lab_dir(other) / STATE_NAME for other in list_labs() if other != name]
    if REGISTRY_DIR.is_dir():
        for entry in REGISTRY_DIR.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                owner = Path(json.loads(entry.read_text())["lab_dir"])
                if owner != lab_dir(name):
                    journals.append(owner / STATE_NAME)
    subnets, prefixes = [], set()
    for path in journals:
        with contextlib.suppress(FleetError):
            j = Journal.load(path)
            if j is not None:
                if j.data.get("subnet"):
                    subnets.append(str(j.data["subnet"]))
                prefixes.add(str(j.data.get("link_prefix", "")))
    return subnets, prefixes


def _create(name: str, shape: Shape, netem: Netem, progress: Callable[[str], None]) -> Lab:
    d = lab_dir(name)
    taken, prefixes = _other_labs_subnets(name)
    if link_prefix(name) in prefixes:
        raise FleetError(f"lab name {name!r} hashes like another lab's; pick another name")
    subnet = choose_subnet(
        _ip_json("-4", "route", "show", "table", "all"), _ip_json("-4", "addr", "show"), taken
    )
    plan = plan_lab(name, shape, subnet)
    d.mkdir(parents=True)
    journal = Journal.create(d / STATE_NAME, plan, netem)
    LOG.info("lab %s: %s in %s", name, shape.describe(), subnet)

    progress("keys")
    journal.will_create_file(d / keys.PRIVATE_NAME)
    journal.will_create_file(d / keys.PUBLIC_NAME)
    keys.ensure_key_pair(d, comment=f"mqlab-lab-{name}")

    progress(f"bridge {plan.bridge} ({plan.coordinator_ip}/24)")
    journal.will_create_link(plan.bridge)
    _run(["ip", "link", "add", plan.bridge, "type", "bridge"])
    _run(["ip", "link", "set", plan.bridge, "alias", ALIAS_PREFIX + name])
    _run(["ip", "link", "set", plan.bridge, "addrgenmode", "none"])  # no IPv6 chatter
    _run(["ip", "addr", "add", f"{plan.coordinator_ip}/24", "dev", plan.bridge])
    _run(["ip", "link", "set", plan.bridge, "up"])

    host_keys = []
    for h in plan.hosts:
        progress(f"host {h.name} ({h.address})")
        journal.will_create_netns(h.namespace)
        _run(["ip", "netns", "add", h.namespace])
        _run(["ip", "-n", h.namespace, "link", "set", "lo", "up"])
        journal.will_create_link(h.veth)
        veth = ["ip", "link", "add", h.veth, "type", "veth"]
        _run([*veth, "peer", "name", INNER_DEV, "netns", h.namespace])
        _run(["ip", "link", "set", h.veth, "alias", ALIAS_PREFIX + name])
        _run(["ip", "link", "set", h.veth, "addrgenmode", "none"])
        _run(["ip", "link", "set", h.veth, "master", plan.bridge])
        _run(["ip", "link", "set", h.veth, "up"])
        _run(["ip", "-n", h.namespace, "link", "set", INNER_DEV, "addrgenmode", "none"])
        _run(["ip", "-n", h.namespace, "addr", "add", f"{h.address}/24", "dev", INNER_DEV])
        _run(["ip", "-n", h.namespace, "link", "set", INNER_DEV, "up"])
        if netem.delay_ms:
            _add_netem(h.namespace, netem)
        host_keys.append((h.address, _host_key(journal, d, h)))
        (d / "hosts" / h.name).mkdir(parents=True, exist_ok=True)
    (d / "hosts" / "default").mkdir(parents=True, exist_ok=True)

    known_hosts = d / KNOWN_HOSTS_NAME
    journal.will_create_file(known_hosts)
    known_hosts.write_text(known_hosts_text(host_keys))

    progress("sshd per host")
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # privilege separation
    procs = {}
    for h in plan.hosts:
        cfg = d / "sshd" / h.name / "sshd_config"
        journal.will_create_file(cfg)
        cfg.write_text(sshd_config(h, d))
        journal.will_start_sshd(h.name)
        cmd = ["ip", "netns", "exec", h.namespace, SSHD, "-D", "-e", "-f", str(cfg)]
        proc, rec = process.spawn(cmd, d / "sshd" / h.name / "sshd.log")
        journal.started_sshd(h.name, rec)
        procs[h.name] = proc
    _wait_for_sshd(plan, d, procs)

    inv_path = d / INVENTORY_NAME
    journal.will_create_file(inv_path)
    inventory.save(build_inventory(plan, d, netem), inv_path)
    journal.mark_up()
    LOG.info("lab %s is up: %s", name, inv_path)
    return Lab(name, d, inv_path, inventory.load(inv_path))


def _add_netem(ns: str, netem: Netem) -> None:
    cmd = ["tc", "-n", ns, "qdisc", "add", "dev", INNER_DEV, "root", *netem.tc_args()]
    try:
        _run(cmd)
    except FleetError as e:
        if "unknown" in str(e).lower():
            raise FleetError(
                "this kernel has no netem qdisc (sch_netem, CONFIG_NET_SCH_NETEM), needed for "
                "--delay-ms: `modprobe sch_netem`, or run the lab without delay"
            ) from None
        raise


def _host_key(journal: Journal, d: Path, h: HostPlan) -> str:
    key = d / "sshd" / h.name / "ssh_host_ed25519_key"
    key.parent.mkdir(parents=True, exist_ok=True)
    journal.will_create_file(key)
    journal.will_create_file(key.with_name(key.name + ".pub"))
    comment = f"mqlab-lab-{journal.data['name']}-{h.name}"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)])
    return key.with_name(key.name + ".pub").read_text().strip()


def _wait_for_sshd(plan: LabPlan, d: Path, procs: dict[str, subprocess.Popen[bytes]]) -> None:
    pending = {h.name: h for h in plan.hosts}
    deadline = time.monotonic() + SSHD_READY_TIMEOUT_S
    while pending:
        for host_name, h in list(pending.items()):
            log = d / "sshd" / host_name / "sshd.log"
            if procs[host_name].poll() is not None:
                raise FleetError(
                    f"sshd of {host_name} exited with code {procs[host_name].returncode} "
                    f"({_last_line(log)}); see {log}"
                )
            if process.port_open(h.address, SSH_PORT):
                del pending[host_name]
        if not pending:
            return
        if time.monotonic() > deadline:
            host_name = next(iter(pending))
            log = d / "sshd" / host_name / "sshd.log"
            raise FleetError(
                f"sshd of {host_name} did not accept connections on "
                f"{pending[host_name].address}:{SSH_PORT} within {SSHD_READY_TIMEOUT_S:g} s; "
                f"see {log}"
            )
        time.sleep(0.05)


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "empty log"


# -- down -----------------------------------------------------------------------------------
def down(name: str) -> bool:
    """Remove lab ``name`` and everything it made or started; False if nothing existed."""
    check_name(name)
    require_root()
    _require_tool("ip")
    with _labs_lock():
        owner = foreign_owner(name)
        if owner is not None:
            raise _foreign_error(name, owner)
        return _teardown(name, _journal(name))


def _teardown(name: str, journal: Journal | None) -> bool:
    d = lab_dir(name)
    namespaces, links = leftovers(name, journal, _namespaces(), _links())
    records = list(journal.sshd_records.values()) if journal else []
    existed = journal is not None or d.exists() or bool(namespaces) or bool(links)
    if not existed:
        _release(name)
        return False
    LOG.info("lab %s: removing namespaces %s, links %s", name, namespaces, links)
    _end_processes(namespaces, records)
    for ns in namespaces:
        _run(["ip", "netns", "del", ns])
    for link in links:
        try:
            _run(["ip", "link", "del", link])
        except FleetError as e:
            if "cannot find device" not in str(e).lower():
                raise  # else: gone with its namespace's peer
    for f in journal.files if journal else []:
        if not f.is_relative_to(d):
            f.unlink(missing_ok=True)
    for path in owned_paths(d):
        shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)
    _check_gone(name)
    _release(name)
    return True


HOST_TMP = "/tmp"  # noqa: S108 - where mqlab makes dirs on hosts (``mktemp -d``)


def owned_paths(d: Path) -> list[Path]:
    """What mqlab made on the lab's hosts outside their roots (``Host.own``): only temp
    dirs named ``mqlab-*`` count, whatever else a host's ``owned`` file says."""
    out = []
    tmp = Path(HOST_TMP)
    for f in sorted(d.glob("hosts/*/owned")):
        for line in f.read_text(errors="replace").splitlines():
            p = Path(line.strip())
            if p.is_absolute() and p.parent == tmp and p.name.startswith("mqlab-"):
                out.append(p)
    return out


def _check_gone(name: str) -> None:
    """Namespaces vanish at once; veth pairs go with them, asynchronously: wait briefly."""
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        namespaces, links = leftovers(name, None, _namespaces(), _links())
        if not namespaces and not links and not lab_dir(name).exists():
            return
        if time.monotonic() > deadline:
            raise FleetError(
                f"lab {name}: still there after down: namespaces {namespaces}, links {links}, "
                f"dir {lab_dir(name) if lab_dir(name).exists() else 'removed'}"
            )
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child (sshd started in this process)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _end_processes(namespaces: list[str], records: list[ProcessRecord]) -> None:
    """SIGTERM every process in the namespaces (and the recorded sshds), SIGKILL after 5 s."""
    me = os.getpid()

    def current() -> set[int]:
        pids = {r.pid for r in records if process.is_alive(r)}
        for ns in namespaces:
            pids.update(_ns_pids(ns))
        pids.discard(me)
        return {p for p in pids if _alive(p)}

    signalled: set[int] = set()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    pids = current()
    while pids and time.monotonic() < deadline:
        for pid in pids - signalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            signalled.add(pid)
        time.sleep(0.05)
        pids = current()
    if pids:
        LOG.warning(
            "processes %s did not end on SIGTERM within %.0f s: SIGKILL", pids, STOP_TIMEOUT_S
        )
    kill_deadline = time.monotonic() + KILL_WAIT_S
    while pids and time.monotonic() < kill_deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        pids = current()
    for pid in signalled:
        _alive(pid)  # reap
    if pids:
        raise FleetError(f"processes {sorted(pids)} of the lab did not end even on SIGKILL")
