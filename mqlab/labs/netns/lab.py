"""``up`` and ``down``: build a lab (bridge, a namespace, veth pair and sshd per host) and
remove it with everything it made or started."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from mqlab.errors import FleetError
from mqlab.hosts import process
from mqlab.labs.aws import inventory, keys
from mqlab.labs.netns import machine, state
from mqlab.labs.netns.journal import Journal, leftovers
from mqlab.labs.netns.plan import (
    ALIAS_PREFIX,
    INNER_DEV,
    INVENTORY_NAME,
    KILL_WAIT_S,
    KNOWN_HOSTS_NAME,
    MAX_HOSTS,
    SSH_PORT,
    SSHD,
    SSHD_READY_TIMEOUT_S,
    STATE_NAME,
    HostPlan,
    Lab,
    LabPlan,
    Netem,
    Shape,
    build_inventory,
    check_name,
    choose_subnet,
    known_hosts_text,
    link_prefix,
    plan_lab,
    quiet,
    sshd_config,
)

LOG = logging.getLogger(__name__)


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
    machine.require_root()
    machine.require_tools(netem=netem.delay_ms > 0)
    with state.labs_lock():
        owner = state.foreign_owner(name)
        if owner is not None:
            raise state.foreign_error(name, owner)
        journal = state.journal_of(name)
        if journal is not None:
            lab = state.find(name)
            if lab is not None:
                if journal.shape == shape and journal.netem == netem:
                    progress(f"lab {name} is already up")
                    LOG.info("lab %s is already up: reusing it", name)
                    return lab
                raise FleetError(
                    f"lab {name!r} is up with {journal.shape.describe()}, "
                    f"{journal.netem.describe()}; remove it first: mqlab lab down --name {name}"
                )
        old_ns, old_links = leftovers(name, None, machine.namespaces(), machine.links())
        if journal is None and (old_ns or old_links):
            raise FleetError(
                f"namespaces or links of a lab named {name!r} exist on this machine, but "
                f"{state.lab_dir(name)} has no journal of them (remains of a lab whose state dir "
                f"is gone): pick another name, or remove them: mqlab lab down --name {name}"
            )
        if journal is not None or state.lab_dir(name).exists():
            progress(f"removing what is left of an earlier lab {name}")
            LOG.warning("lab %s: removing the remains of an earlier, incomplete lab", name)
            _teardown(name, journal)
        try:
            state.claim(name)
            return _create(name, shape, netem, progress)
        except BaseException:
            LOG.warning("lab %s: up failed; removing what it created", name)
            try:
                _teardown(name, state.journal_of(name))
            except Exception as e:  # keep the first error; say the cleanup failed too
                LOG.error(
                    "lab %s: cleanup failed too (%s): run `mqlab lab down --name %s`", name, e, name
                )
            raise


def _other_labs_subnets(name: str) -> tuple[list[str], set[str]]:
    """Subnets and link prefixes of every other lab: this state dir's and other state dirs'."""
    journals = [state.lab_dir(other) / STATE_NAME for other in state.list_labs() if other != name]
    if state.REGISTRY_DIR.is_dir():
        for entry in state.REGISTRY_DIR.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                owner = Path(json.loads(entry.read_text())["lab_dir"])
                if owner != state.lab_dir(name):
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
    d = state.lab_dir(name)
    taken, prefixes = _other_labs_subnets(name)
    if link_prefix(name) in prefixes:
        raise FleetError(f"lab name {name!r} hashes like another lab's; pick another name")
    subnet = choose_subnet(
        machine.ip_json("-4", "route", "show", "table", "all"),
        machine.ip_json("-4", "addr", "show"),
        taken,
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
    machine.run(["ip", "link", "add", plan.bridge, "type", "bridge"])
    machine.run(["ip", "link", "set", plan.bridge, "alias", ALIAS_PREFIX + name])
    machine.run(["ip", "link", "set", plan.bridge, "addrgenmode", "none"])  # no IPv6 chatter
    machine.run(["ip", "addr", "add", f"{plan.coordinator_ip}/24", "dev", plan.bridge])
    machine.run(["ip", "link", "set", plan.bridge, "up"])

    host_keys = []
    for h in plan.hosts:
        progress(f"host {h.name} ({h.address})")
        journal.will_create_netns(h.namespace)
        machine.run(["ip", "netns", "add", h.namespace])
        machine.run(["ip", "-n", h.namespace, "link", "set", "lo", "up"])
        journal.will_create_link(h.veth)
        veth = ["ip", "link", "add", h.veth, "type", "veth"]
        machine.run([*veth, "peer", "name", INNER_DEV, "netns", h.namespace])
        machine.run(["ip", "link", "set", h.veth, "alias", ALIAS_PREFIX + name])
        machine.run(["ip", "link", "set", h.veth, "addrgenmode", "none"])
        machine.run(["ip", "link", "set", h.veth, "master", plan.bridge])
        machine.run(["ip", "link", "set", h.veth, "up"])
        machine.run(["ip", "-n", h.namespace, "link", "set", INNER_DEV, "addrgenmode", "none"])
        machine.run(["ip", "-n", h.namespace, "addr", "add", f"{h.address}/24", "dev", INNER_DEV])
        machine.run(["ip", "-n", h.namespace, "link", "set", INNER_DEV, "up"])
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
        machine.run(cmd)
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
    machine.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)])
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
    machine.require_root()
    machine.require_tool("ip")
    with state.labs_lock():
        owner = state.foreign_owner(name)
        if owner is not None:
            raise state.foreign_error(name, owner)
        return _teardown(name, state.journal_of(name))


def _teardown(name: str, journal: Journal | None) -> bool:
    d = state.lab_dir(name)
    namespaces, links = leftovers(name, journal, machine.namespaces(), machine.links())
    records = list(journal.sshd_records.values()) if journal else []
    existed = journal is not None or d.exists() or bool(namespaces) or bool(links)
    if not existed:
        state.release(name)
        return False
    LOG.info("lab %s: removing namespaces %s, links %s", name, namespaces, links)
    machine.end_processes(namespaces, records)
    for ns in namespaces:
        machine.run(["ip", "netns", "del", ns])
    for link in links:
        try:
            machine.run(["ip", "link", "del", link])
        except FleetError:
            # a veth goes with its namespace's peer, asynchronously: `ip` then says "Cannot
            # find device" or, gone between its lookup and the delete, "No such device"
            if link in {str(x.get("ifname", "")) for x in machine.links()}:
                raise
    for f in journal.files if journal else []:
        if not f.is_relative_to(d):
            f.unlink(missing_ok=True)
    for path in owned_paths(d):
        shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)
    _check_gone(name)
    state.release(name)
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
        namespaces, links = leftovers(name, None, machine.namespaces(), machine.links())
        if not namespaces and not links and not state.lab_dir(name).exists():
            return
        if time.monotonic() > deadline:
            raise FleetError(
                f"lab {name}: still there after down: namespaces {namespaces}, links {links}, "
                f"dir {state.lab_dir(name) if state.lab_dir(name).exists() else 'removed'}"
            )
        time.sleep(0.05)
