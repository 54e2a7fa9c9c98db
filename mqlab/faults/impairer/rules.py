"""The iptables rule that sends a device's outbound IPv4 packets to the queue, tagged
with mqlab's comment; removed however the impairer ends."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence

from .common import FleetError, check_dev, check_queue

# -- the iptables rule -------------------------------------------------------------------
IPTABLES = "iptables"
CHAIN = "OUTPUT"
COMMENT_PREFIX = "mqlab-impair-"
COMMENT_RE = re.compile(r"^mqlab-impair-(\d+)$")
IPTABLES_TIMEOUT_S = 30.0
IPTABLES_FIX = (
    "run as root, on a kernel with NFQUEUE (CONFIG_NETFILTER_XT_TARGET_NFQUEUE, "
    "CONFIG_NETFILTER_XT_MATCH_COMMENT, and nf_tables with CONFIG_NFT_COMPAT or ip_tables)"
)


# -- the iptables rule -------------------------------------------------------------------
def comment(queue: int) -> str:
    return f"{COMMENT_PREFIX}{queue}"


def rule_spec(dev: str, queue: int, loopback_here: bool = False) -> list[str]:
    """The rule, chain first, as ``iptables -S`` prints it (what ``-I``/``-D`` take)."""
    return [
        CHAIN,
        "-o",
        check_dev(dev, loopback_here),
        "-m",
        "comment",
        "--comment",
        comment(check_queue(queue)),
        "-j",
        "NFQUEUE",
        "--queue-num",
        str(queue),
        "--queue-bypass",
    ]


def add_command(dev: str, queue: int, loopback_here: bool = False) -> list[str]:
    """``iptables -w -I OUTPUT -o DEV -m comment --comment mqlab-impair-N -j NFQUEUE
    --queue-num N --queue-bypass``."""
    return [IPTABLES, "-w", "-I", *rule_spec(dev, queue, loopback_here)]


def list_command() -> list[str]:
    return [IPTABLES, "-w", "-S", CHAIN]


def delete_commands(listing: str, queue: int | None = None) -> list[list[str]]:
    """From ``iptables -S OUTPUT`` output: the ``iptables -w -D ...`` commands of the rules
    carrying mqlab's comment (of ``queue`` only, unless None); no other rule is named."""
    out = []
    for line in listing.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if len(words) < 2 or words[0] != "-A" or words[1] != CHAIN:
            continue
        queues = [
            int(m.group(1))
            for flag, value in zip(words, words[1:], strict=False)
            if flag == "--comment" and (m := COMMENT_RE.match(value))
        ]
        if queues and (queue is None or queue in queues):
            out.append([IPTABLES, "-w", "-D", *words[1:]])
    return out


def _iptables(cmd: Sequence[str], doing: str) -> str:
    try:
        res = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=IPTABLES_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise FleetError(
            f"impair: {doing}: {cmd[0]} not found (install Debian's iptables: "
            "apt-get install iptables)"
        ) from None
    except subprocess.TimeoutExpired:
        raise FleetError(
            f"impair: {doing}: {cmd[0]} did not answer in {IPTABLES_TIMEOUT_S:g} s (another "
            "process holds the xtables lock?)"
        ) from None
    if res.returncode != 0:
        why = next((ln.strip() for ln in res.stderr.splitlines() if ln.strip()), "")
        raise FleetError(
            f"impair: {doing}: {shlex.join(cmd)} exited {res.returncode}: {why} ({IPTABLES_FIX})"
        )
    return res.stdout


def add_rule(dev: str, queue: int, loopback_here: bool = False) -> None:
    """Insert the rule that queues this namespace's IPv4 egress on ``dev`` to ``queue``
    (``loopback_here``: see :func:`check_dev`)."""
    cmd = add_command(dev, queue, loopback_here)
    _iptables(cmd, f"adding the rule for {dev} (queue {queue})")


def remove_rules(queue: int | None = None) -> int:
    """Delete mqlab's impair rules from OUTPUT (of ``queue`` only, unless None); other
    rules are left alone. Idempotent; returns how many were deleted."""
    doing = "removing mqlab's rules" + ("" if queue is None else f" (queue {queue})")
    deleted = 0
    for cmd in delete_commands(_iptables(list_command(), doing), queue):
        try:
            _iptables(cmd, doing)
            deleted += 1
        except FleetError:  # gone meanwhile (another remover) is fine; still there is not
            if cmd[3:] in [c[3:] for c in delete_commands(_iptables(list_command(), doing))]:
                raise
    return deleted
