"""What every part of the impairer shares: its error, its settings, the checks of a
device and a queue number (standard library only: the impairer runs alone on lab hosts)."""

from __future__ import annotations

import re
import socket

try:
    from mqlab.errors import FleetError
except ImportError:  # shipped alone to a lab host and run there as `python3 impair.py`

    class FleetError(Exception):  # type: ignore[no-redef]
        """mqlab's FleetError, for the script on its own (standard library only)."""

        exit_code = 2


# -- the impairer's settings -------------------------------------------------------------
QUEUE_MAXLEN = 65536  # packets the kernel holds for us before fail-open accepts
RCVBUF_BYTES = 8 << 20
RECV_BYTES = 256 << 10
RECV_BATCH = 64  # datagrams read before due releases are looked at again
VERDICTS_PER_SEND = 1024  # verdict messages concatenated into one datagram
ACK_TIMEOUT_S = 5.0
GRACE_S = 0.05  # after the rule is gone: packets still on their way to us are accepted
MAX_QUEUE = 65535
DEV_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")  # one device (no "+" wildcard), IFNAMSIZ


EXIT_OK = 0
EXIT_USAGE = 2


def check_dev(dev: str, loopback_here: bool = False) -> str:
    """``dev`` if it names one device other than loopback, else FleetError; with
    ``loopback_here``, loopback too, but only in a network namespace whose one link is
    loopback (one made for a benchmark: nothing outside it uses that loopback)."""
    if not DEV_RE.match(dev):
        raise FleetError(
            f"impair: device {dev!r}: not an interface name (1-15 letters, digits, _.:@-; "
            "no wildcard)"
        )
    if dev == "lo" and not (loopback_here and only_loopback()):
        raise FleetError("impair: device 'lo': loopback is never impaired (name the host's link)")
    return dev


def only_loopback() -> bool:
    """Whether loopback is the one network link of this process's namespace."""
    try:
        return [name for _, name in socket.if_nameindex()] == ["lo"]
    except OSError:
        return False


def check_queue(queue: int) -> int:
    if not 0 <= queue <= MAX_QUEUE:
        raise FleetError(f"impair: queue {queue}: must be 0..{MAX_QUEUE}")
    return queue
