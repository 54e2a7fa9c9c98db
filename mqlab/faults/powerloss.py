"""Power loss on real hosts: the ``power_loss`` and ``power_loss_all`` faults.

A process crash (``kill_node``, ``crash_all``) leaves the kernel's page cache alone: what
a broker wrote but did not fsync still reaches the disk, so it cannot show what an fsync
policy is worth. A power cut can. On a host of its own (an EC2 instance, a machine of an
``ssh`` inventory) mqlab comes as close as software can: the kernel's magic SysRq ``b``
(``echo b > /proc/sysrq-trigger``) reboots at once, without syncing or unmounting, so
every write still in the page cache is lost, as in a power cut (a disk's own volatile
cache is not: on EBS a write is durable once acknowledged).

It reboots the whole host, so it is refused where the host's kernel is this machine's
(``local`` and ``netns`` targets): the scenario error says so before anything starts.
This module is the host side: reboot, then wait until each host answers again with a new
boot id (``/proc/sys/kernel/random/boot_id``); the run restarts the broker nodes mqlab
manages (on ``aws`` the images' systemd units start them at boot).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mqlab.archive import faultlog as fl
from mqlab.archive.faultlog import FaultEntry
from mqlab.brokers.cluster import LocalCluster
from mqlab.errors import ClusterError, FleetError, MqlabError
from mqlab.faults.target import Target, Where, now_ms
from mqlab.hosts.base import Host

ACTIONS = (fl.POWER_LOSS, fl.POWER_LOSS_ALL)  # unsynced reboots of broker hosts
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# SysRq enabled for the call, then ``b``: reboot now, no sync, no unmount
REBOOT_NOW = "echo 1 > /proc/sys/kernel/sysrq; echo b > /proc/sysrq-trigger"
REBOOT_CALL_S = 5.0  # the call never answers: the host is gone before it can
BACK_TIMEOUT_S = 600.0
POLL_S = 5.0


def boot_id(host: Host) -> str:
    return host.run(["cat", BOOT_ID], timeout_s=30).out.strip()


def cut_power(hosts: Sequence[Host]) -> dict[str, str]:
    """Reboot every host of ``hosts`` at once, unsynced; their boot ids before."""
    before = {h.name: boot_id(h) for h in hosts}

    def reboot(h: Host) -> None:
        with contextlib.suppress(MqlabError):  # the connection dies with the kernel
            h.run(["sh", "-c", REBOOT_NOW], timeout_s=REBOOT_CALL_S, check=False)
        h.close()  # that connection is gone: the next command opens a new one

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        list(pool.map(reboot, hosts))
    return before


def wait_back(
    hosts: Sequence[Host],
    before: dict[str, str],
    timeout_s: float = BACK_TIMEOUT_S,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once every host answers with a boot id other than ``before``'s; FleetError
    naming the hosts that did not come back, or came back without rebooting."""
    deadline = time.monotonic() + timeout_s
    waiting = {h.name: h for h in hosts}
    same: set[str] = set()
    while waiting:
        for name, h in list(waiting.items()):
            try:
                now = boot_id(h)
            except MqlabError:
                h.close()
                continue
            if now == before.get(name):
                same.add(name)  # answered from the old kernel: the reboot has not begun
                continue
            same.discard(name)
            del waiting[name]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            names = ", ".join(sorted(waiting))
            if same >= set(waiting):
                raise FleetError(
                    f"power_loss: {names} did not reboot (same boot id after "
                    f"{timeout_s:g} s): is SysRq allowed there (kernel.sysrq)?"
                )
            raise FleetError(
                f"power_loss: {names} not back {timeout_s:g} s after the power cut; "
                "look at the instance's console, then `mqlab lab down` or `mqlab infra down`"
            )
        sleep(poll_s)


@dataclass
class PowerCut:
    """Broker hosts rebooted unsynced; healed once they are back and their nodes run."""

    cluster: LocalCluster
    nodes: list[int]
    hosts: list[Host]
    boot_ids: dict[str, str]

    @property
    def node(self) -> int:
        return self.nodes[0]

    def heal(self) -> None:
        wait_back(self.hosts, self.boot_ids)
        if self.cluster.attached:  # the images' units start the brokers at boot
            deadline = time.monotonic() + BACK_TIMEOUT_S
            while not all(self.cluster.alive()[i] for i in self.nodes):
                if time.monotonic() > deadline:
                    raise ClusterError("power_loss: the brokers did not start again after boot")
                time.sleep(2.0)
        else:
            self.cluster.restart_nodes(self.nodes)


def check(f: Any, where: Where) -> None:
    if not where.remote or where.lab_kind in ("local", "netns"):
        raise FleetError(
            f"{f.action} reboots a host's kernel: here that kernel is this machine's; "
            'run on hosts of their own (target = "ssh" or "aws")'
        )


def apply(f: Any, target: Target) -> None:
    """Reboot broker hosts unsynced; their nodes are started again once the hosts are
    back (at ``restart_after_s`` at the soonest)."""
    cluster = target.cluster
    check(f, Where(target.remote, target.lab_kind))
    nodes = list(range(cluster.nodes)) if f.action == fl.POWER_LOSS_ALL else [f.node]
    hosts = list({cluster.hosts[i].name: cluster.hosts[i] for i in nodes}.values())
    where = "every broker host" if f.action == fl.POWER_LOSS_ALL else f"node {f.node}'s host"
    target.phase(f"fault: power loss on {where} (unsynced reboot)")
    at_ms = now_ms()
    boot_ids = cut_power(hosts)
    entry = FaultEntry.applied(dataclasses.asdict(f), nodes[0], at_ms, boot_ids=boot_ids)
    if f.action == fl.POWER_LOSS_ALL:
        entry.nodes = cluster.nodes
    key = len(target.log)
    target.log.append(entry)
    target.cuts[key] = PowerCut(cluster, nodes, hosts, boot_ids)
    target.pending.append((f.at_s + (f.restart_after_s or 0.0), fl.HEAL, key))


def heal(cut: PowerCut, key: int, target: Target) -> None:
    target.phase("fault: waiting for the hosts to come back, then starting their nodes")
    try:
        cut.heal()
    finally:
        del target.cuts[key]
    at_ms = now_ms()
    for i in cut.nodes:
        target.log.append(FaultEntry(fl.RESTART_NODE, i, at_ms))
