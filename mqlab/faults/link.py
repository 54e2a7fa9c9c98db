"""Slow and lossy links on lab hosts: the ``netem`` fault (delay, jitter, loss).

For ``duration_s`` the outbound link of one broker node's host delays every packet by
``delay_ms`` ± ``jitter_ms`` and drops ``loss_pct`` % of them; then the link is healed.
Delay on one host's egress adds to every round trip through that host, so the node's
replication and its clients both feel it.

Two ways, chosen per host when the fault starts:

- ``tc netem``, the kernel's network emulator (``tc qdisc replace dev DEV root netem
  delay … loss …``), on hosts whose kernel has it (EC2, most distributions);
- mqlab's NFQUEUE impairer (:mod:`mqlab.faults.impairer`) where the kernel has no
  ``sch_netem`` (this project's CI machine): a standalone Python script shipped to the
  host, which queues the device's outbound packets to itself with an iptables rule and
  drops or releases them on the same schedule. Userspace: it adds a little CPU and
  sub-millisecond scheduling noise that netem does not.

The device is the one the host routes the other brokers through (``ip -o route get``).
The manifest records which way was taken (``via``) and the device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shlex
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from mqlab.archive import faultlog as fl
from mqlab.archive.faultlog import FaultEntry, netem_label
from mqlab.errors import FleetError, MqlabError
from mqlab.faults.target import Target, Where, now_ms, on_own_hosts
from mqlab.hosts.base import Attached, Host

IMPAIRER_DIR = Path(__file__).with_name("impairer")  # a program of its own (stdlib only)
ZIP_MAIN = "import sys\nfrom impairer.main import main\nsys.exit(main())\n"
VIA_TC = "tc netem"
VIA_NFQUEUE = "nfqueue impairer"
ACTIONS = (fl.NETEM,)
QUEUE_NUM = 213  # the NFQUEUE number of mqlab's impairer (one per host at a time)
READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
CMD_TIMEOUT_S = 30.0


def impairer_zip() -> Path:
    """The impairer as the one file shipped to a host: a zip of its folder that the
    host's ``python3`` runs as it is (``python3 mqlab-impair.pyz --dev ...``), made once
    per version of its sources."""
    sources = sorted(IMPAIRER_DIR.glob("*.py"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    out = Path(tempfile.gettempdir()) / f"mqlab-impairer-{digest}.pyz"
    if not out.is_file():
        tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
        with zipfile.ZipFile(tmp, "w") as z:
            for p in sources:
                z.write(p, f"impairer/{p.name}")
            z.writestr(
                "__main__.py", "import sys\nfrom impairer.main import main\nsys.exit(main())\n"
            )
        tmp.replace(out)
    return out


def netem_args(delay_ms: float, jitter_ms: float, loss_pct: float) -> list[str]:
    """The ``netem`` qdisc's parameters (``delay 50ms 10ms loss 2%``)."""
    args = ["netem"]
    if delay_ms or jitter_ms:
        args += ["delay", f"{delay_ms:g}ms"]
        if jitter_ms:
            args.append(f"{jitter_ms:g}ms")
    if loss_pct:
        args += ["loss", f"{loss_pct:g}%"]
    return args


def device_of(route_line: str) -> str:
    """The device of one ``ip -o route get ADDRESS`` line (``… dev eth0 src …``)."""
    words = route_line.split()
    if "dev" not in words or words.index("dev") + 1 >= len(words):
        raise FleetError(f"netem: no device in the route {route_line.strip()!r}")
    return words[words.index("dev") + 1]


def no_netem(stderr: str) -> bool:
    """Whether ``tc``'s error says the kernel has no netem qdisc."""
    text = stderr.lower()
    return "unknown" in text or "not supported" in text or "no such file" in text


@dataclass
class LinkFault:
    """One impaired link: node ``node``'s host, towards ``peer`` (another broker's address)."""

    host: Host
    node: int
    peer: str
    delay_ms: float
    jitter_ms: float
    loss_pct: float
    dev: str = ""
    via: str = ""
    _proc: Attached | None = field(default=None, repr=False)
    _script: str = ""

    @property
    def label(self) -> str:
        return netem_label(
            {
                "node": self.node,
                "delay_ms": self.delay_ms,
                "jitter_ms": self.jitter_ms,
                "loss_pct": self.loss_pct,
            }
        )

    def apply(self) -> None:
        """Impair the link; FleetError in one line when neither way works."""
        res = self.host.run(["ip", "-o", "route", "get", self.peer], timeout_s=CMD_TIMEOUT_S)
        self.dev = device_of(res.out)
        tc = ["tc", "qdisc", "replace", "dev", self.dev, "root"]
        tc += netem_args(self.delay_ms, self.jitter_ms, self.loss_pct)
        res = self.host.run(tc, timeout_s=CMD_TIMEOUT_S, check=False)
        if res.rc == 0:
            self.via = VIA_TC
            return
        if not no_netem(res.err):
            why = res.err.strip()
            raise FleetError(f"netem on {self.host.name}: {shlex.join(tc)} failed: {why}")
        self._start_impairer()

    def _start_impairer(self) -> None:
        self._script = str(PurePosixPath(self.host.root) / "mqlab-impair.pyz")
        self.host.mkdir(self.host.root)
        self.host.put_file(impairer_zip(), self._script)
        self.via = VIA_NFQUEUE
        log = f"{self._script}.log"
        self._proc = self.host.attach(self.impairer_command(), stderr=log)
        try:
            line = self._proc.readline(READY_TIMEOUT_S).strip()
        except FleetError as e:
            line = str(e)
        if line != "ready":
            tail = self.host.run(["tail", "-n", "1", log], check=False).out.strip()
            err = tail or line
            with contextlib.suppress(MqlabError):
                self._stop_impairer()
            raise FleetError(
                f"netem on {self.host.name}: the kernel has no netem and the NFQUEUE "
                f"impairer did not start ({err}); install Debian's iptables on the host"
            )

    def impairer_command(self) -> list[str]:
        return [
            "python3",
            self._script,
            "--dev",
            self.dev,
            "--queue",
            str(QUEUE_NUM),
            "--delay-ms",
            f"{self.delay_ms:g}",
            "--jitter-ms",
            f"{self.jitter_ms:g}",
            "--loss-pct",
            f"{self.loss_pct:g}",
        ]

    def heal(self) -> dict[str, Any]:
        """Restore the link; what the impairer counted (empty for tc). FleetError when the
        impairment may still be in place."""
        if self.via == VIA_TC:
            tc = ["tc", "qdisc", "del", "dev", self.dev, "root"]
            res = self.host.run(tc, timeout_s=CMD_TIMEOUT_S, check=False)
            if res.rc != 0 and "no such file" not in res.err.lower():
                raise FleetError(
                    f"netem on {self.host.name}: could not remove the qdisc ({res.err.strip()}); "
                    f"remove it by hand: tc qdisc del dev {self.dev} root"
                )
            return {}
        if self.via == VIA_NFQUEUE:
            return self._stop_impairer()
        return {}

    def _stop_impairer(self) -> dict[str, Any]:
        counts: dict[str, Any] = {}
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.close_stdin()  # the impairer ends on EOF: rule removed, packets released
            with contextlib.suppress(MqlabError):
                line = proc.readline(STOP_TIMEOUT_S).strip()
                with contextlib.suppress(ValueError):
                    counts = json.loads(line) if line.startswith("{") else {}
            if proc.poll() is None:
                proc.kill()
        # whatever happened to it, no rule of mqlab's stays behind
        res = self.host.run(
            ["python3", self._script, "--remove-only"], timeout_s=CMD_TIMEOUT_S, check=False
        )
        if res.rc != 0:
            raise FleetError(
                f"netem on {self.host.name}: could not remove the NFQUEUE rule "
                f"({res.err.strip()}); remove it by hand: python3 {self._script} --remove-only"
            )
        return counts


def check(f: Any, where: Where) -> None:
    on_own_hosts(where, fl.NETEM)


def apply(f: Any, target: Target) -> None:
    """Slow down node ``f.node``'s outbound link; healed later (:func:`heal`)."""
    at_ms = now_ms()
    on_own_hosts(target, fl.NETEM)
    hosts = target.cluster.hosts
    peer = hosts[(f.node + 1) % len(hosts)].address if len(hosts) > 1 else hosts[0].address
    link = LinkFault(
        hosts[f.node], f.node, peer, f.delay_ms or 0.0, f.jitter_ms or 0.0, f.loss_pct or 0.0
    )
    key = len(target.log)
    entry = FaultEntry.applied(dataclasses.asdict(f), f.node, at_ms)
    target.log.append(entry)
    target.cuts[key] = link  # before the link is touched: whatever happens next, it is healed
    target.phase(f"fault: {link.label} for {f.duration_s:g} s")
    began = time.monotonic()
    try:
        link.apply()
    except MqlabError as e:
        entry.error = str(e)
        raise
    finally:
        entry.details.update(via=link.via, dev=link.dev)
    entry.at_ms = now_ms()  # in effect from now, for duration_s
    target.pending.append((f.at_s + (time.monotonic() - began) + f.duration_s, fl.HEAL, key))


def heal(link: LinkFault, key: int, target: Target) -> None:
    target.phase(f"fault: healing the link of node {link.node}")
    entry = FaultEntry(fl.NETEM_END, link.node)
    try:
        counts = link.heal()
    except MqlabError as e:
        entry.error = str(e)
        raise
    finally:
        del target.cuts[key]
        entry.at_ms = now_ms()
        target.log.append(entry)
    if counts:
        entry.details["impairer"] = counts
