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
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from mqlab.errors import FleetError, MqlabError
from mqlab.hosts.base import Host

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
