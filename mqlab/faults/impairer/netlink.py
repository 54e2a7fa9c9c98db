"""A netem-like link impairer in userspace: delay, jitter and loss on a host's egress link.

Why: the kernels mqlab's lab hosts run on may lack ``sch_netem`` (here
``CONFIG_NET_SCH_NETEM`` is not set, so ``tc qdisc ... netem`` fails), but they have
NFQUEUE (``CONFIG_NETFILTER_NETLINK_QUEUE``, ``CONFIG_NETFILTER_XT_TARGET_NFQUEUE``,
reached through ``iptables``, nf_tables or legacy). So this module impairs a link from
userspace, in the host's network namespace:

- one iptables rule ``-I OUTPUT -o DEV -m comment --comment mqlab-impair-N -j NFQUEUE
  --queue-num N --queue-bypass`` sends every IPv4 packet this host sends out of ``DEV``
  to queue ``N`` (never loopback: the rule names the device);
- this process is bound to queue ``N`` over nfnetlink (``AF_NETLINK`` /
  ``NETLINK_NETFILTER``, metadata only, no payload copy) and gives each packet a verdict:
  ``NF_DROP`` with probability ``loss_pct / 100``, otherwise ``NF_ACCEPT`` at its own
  release time, arrival + a delay drawn uniformly in ``[delay - jitter, delay + jitter]``
  (clamped at 0); packets overtake each other when jitter says so, as with netem.

The rule carries ``--queue-bypass``: when no process is bound to the queue (the impairer
ended, or was killed), packets pass unimpaired; ``remove_rules`` deletes mqlab's rules
(only those carrying its comment) after a crash. An impairer killed with SIGKILL loses
the packets it held (the kernel drops them when the queue unbinds) and leaves its rule,
bypassed, until ``--remove-only``. The queue is bound fail-open: a full queue accepts
packets instead of dropping them.

``python -m mqlab.faults.impairer.netlink --dev eth0 --queue 7 --delay-ms 50 --jitter-ms 10
--loss-pct 2 [--seed N]`` binds the queue, adds the rule, prints ``ready`` and impairs
until SIGTERM, SIGINT or SIGHUP, or until its stdin reaches end of file (the coordinator
holds a pipe to it: when the coordinator goes away, the impairer ends too; so do not
start it with stdin on ``/dev/null``). On the way out it removes the rule, accepts every
packet it still holds, and prints one JSON line of counts (``packets``, ``dropped``,
``delayed``, ``enobufs``). ``--remove-only`` removes mqlab's leftover rules and exits.

Limits, compared with netem:

- userspace: each packet costs a few microseconds of CPU in one Python thread, and
  release times carry sub-millisecond scheduling noise (more on a loaded machine);
- egress only (the packets a host sends); a delay on one host's egress adds to every
  round trip through that host;
- IPv4 only (the rule is an ``iptables`` rule; IPv6 packets pass unimpaired);
- a held packet stays charged to its sending socket (netem orphans it), so one TCP
  connection keeps at most ``net.ipv4.tcp_limit_output_bytes`` inside the delay;
- GSO packets are queued whole (as netem holds them): a loss drops a whole TSO burst.
"""

from __future__ import annotations

import argparse
import errno
import heapq
import json
import logging
import math
import os
import random
import re
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn, Protocol, TextIO

try:
    from mqlab.errors import FleetError
except ImportError:  # shipped alone to a lab host and run there as `python3 impair.py`

    class FleetError(Exception):  # type: ignore[no-redef]
        """mqlab's FleetError, for the script on its own (standard library only)."""

        exit_code = 2


LOG = logging.getLogger(__name__)

# -- nfnetlink wire format (include/uapi/linux/netlink.h, netfilter/nfnetlink*.h) -------
NETLINK_NETFILTER = 12
SO_RCVBUFFORCE = 33  # asm-generic/socket.h (not in Python's socket module)
NLMSG_HDR = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid (host order)
NFGENMSG = struct.Struct("!BBH")  # nfgenmsg: family, version, res_id (network order)
NLATTR = struct.Struct("=HH")  # nlattr: len, type (host order)
NLMSGERR = struct.Struct("=i")  # nlmsgerr.error, then the offending nlmsghdr
NLMSG_ALIGNTO = 4
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4
NFNETLINK_V0 = 0

NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
PACKET_HDR = struct.Struct("!IHB")  # nfqnl_msg_packet_hdr (packed): packet_id, hw_protocol, hook
VERDICT_HDR = struct.Struct("!II")  # nfqnl_msg_verdict_hdr: verdict, id

NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
CONFIG_CMD = struct.Struct("!BxH")  # nfqnl_msg_config_cmd: command, pad, pf
CONFIG_PARAMS = struct.Struct("!IB")  # nfqnl_msg_config_params (packed): copy_range, copy_mode
BE32 = struct.Struct("!I")
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 0x1
NFQA_CFG_F_GSO = 0x4  # hand over GSO packets whole (no payload is copied anyway)

NF_DROP = 0
NF_ACCEPT = 1

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

EXIT_OK = 0
EXIT_USAGE = 2


# -- wire format: pure packing and parsing ------------------------------------------------
def nlmsg_align(n: int) -> int:
    return (n + NLMSG_ALIGNTO - 1) & ~(NLMSG_ALIGNTO - 1)


def queue_msg_type(msg: int) -> int:
    """The nlmsg_type of nfnetlink_queue message ``msg``: subsystem << 8 | message."""
    return NFNL_SUBSYS_QUEUE << 8 | msg


def pack_attr(attr_type: int, data: bytes) -> bytes:
    """One nlattr: header, ``data``, zero padding to 4 bytes (the length excludes it)."""
    length = NLATTR.size + len(data)
    return NLATTR.pack(length, attr_type) + data + bytes(nlmsg_align(length) - length)


def pack_message(msg_type: int, flags: int, seq: int, payload: bytes, portid: int = 0) -> bytes:
    """One netlink message: nlmsghdr (length includes itself) + ``payload``, padded."""
    length = NLMSG_HDR.size + len(payload)
    return (
        NLMSG_HDR.pack(length, msg_type, flags, seq, portid)
        + payload
        + bytes(nlmsg_align(length) - length)
    )


def pack_nfgenmsg(family: int, res_id: int) -> bytes:
    """nfgenmsg: address family, NFNETLINK_V0, ``res_id`` (the queue number)."""
    return NFGENMSG.pack(family, NFNETLINK_V0, res_id)


def bind_request(queue: int, seq: int) -> bytes:
    """NFQNL_MSG_CONFIG with NFQA_CFG_CMD = BIND (pf AF_INET) for ``queue``, acked."""
    cmd = pack_attr(NFQA_CFG_CMD, CONFIG_CMD.pack(NFQNL_CFG_CMD_BIND, socket.AF_INET))
    return pack_message(
        queue_msg_type(NFQNL_MSG_CONFIG),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        pack_nfgenmsg(socket.AF_INET, queue) + cmd,
    )


def params_request(queue: int, seq: int, maxlen: int = QUEUE_MAXLEN) -> bytes:
    """NFQNL_MSG_CONFIG for a bound ``queue``: copy mode META (no payload), queue length
    ``maxlen``, flags FAIL_OPEN | GSO (with the same mask); acked."""
    flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO
    attrs = (
        pack_attr(NFQA_CFG_PARAMS, CONFIG_PARAMS.pack(0, NFQNL_COPY_META))
        + pack_attr(NFQA_CFG_QUEUE_MAXLEN, BE32.pack(maxlen))
        + pack_attr(NFQA_CFG_FLAGS, BE32.pack(flags))
        + pack_attr(NFQA_CFG_MASK, BE32.pack(flags))
    )
    return pack_message(
        queue_msg_type(NFQNL_MSG_CONFIG),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        pack_nfgenmsg(socket.AF_UNSPEC, queue) + attrs,
    )


def verdict_message(queue: int, packet_id: int, verdict: int) -> bytes:
    """NFQNL_MSG_VERDICT for one packet (not acked: the kernel answers only errors)."""
    return pack_message(
        queue_msg_type(NFQNL_MSG_VERDICT),
        NLM_F_REQUEST,
        0,
        pack_nfgenmsg(socket.AF_UNSPEC, queue)
        + pack_attr(NFQA_VERDICT_HDR, VERDICT_HDR.pack(verdict, packet_id)),
    )


@dataclass(frozen=True)
class NlMessage:
    """One netlink message of a datagram; ``payload`` excludes the header and padding."""

    type: int
    flags: int
    seq: int
    portid: int
    payload: bytes


def split_messages(data: bytes | memoryview) -> list[NlMessage]:
    """The netlink messages of one datagram (several may share it), in order.

    Raises ValueError on a truncated or malformed header."""
    out = []
    view = memoryview(data)
    offset = 0
    while offset + NLMSG_HDR.size <= len(view):
        length, msg_type, flags, seq, portid = NLMSG_HDR.unpack_from(view, offset)
        if length < NLMSG_HDR.size or offset + length > len(view):
            raise ValueError(f"netlink message of length {length} at {offset} of {len(view)}")
        payload = bytes(view[offset + NLMSG_HDR.size : offset + length])
        out.append(NlMessage(msg_type, flags, seq, portid, payload))
        offset += nlmsg_align(length)
    if offset < len(view) and any(view[offset:]):
        raise ValueError(f"{len(view) - offset} trailing bytes after the last netlink message")
    return out


def parse_attrs(data: bytes | memoryview) -> dict[int, bytes]:
    """nlattr type (flags masked off) -> value; the last one wins if a type repeats."""
    out = {}
    view = memoryview(data)
    offset = 0
    while offset + NLATTR.size <= len(view):
        length, attr_type = NLATTR.unpack_from(view, offset)
        if length < NLATTR.size or offset + length > len(view):
            raise ValueError(f"attribute of length {length} at {offset} of {len(view)}")
        out[attr_type & NLA_TYPE_MASK] = bytes(view[offset + NLATTR.size : offset + length])
        offset += nlmsg_align(length)
    return out


@dataclass(frozen=True)
class PacketHeader:
    """nfqnl_msg_packet_hdr of a queued packet (``queue`` from the nfgenmsg's res_id)."""

    queue: int
    packet_id: int
    hw_protocol: int
    hook: int


def parse_packet(payload: bytes) -> PacketHeader:
    """The header of an NFQNL_MSG_PACKET payload (nfgenmsg, then attributes)."""
    if len(payload) < NFGENMSG.size:
        raise ValueError(f"packet message of {len(payload)} bytes has no nfgenmsg")
    _, _, queue = NFGENMSG.unpack_from(payload)
    attrs = parse_attrs(payload[NFGENMSG.size :])
    hdr = attrs.get(NFQA_PACKET_HDR)
    if hdr is None or len(hdr) < PACKET_HDR.size:
        raise ValueError("packet message without NFQA_PACKET_HDR")
    packet_id, hw_protocol, hook = PACKET_HDR.unpack_from(hdr)
    return PacketHeader(queue, packet_id, hw_protocol, hook)


def parse_error(payload: bytes) -> tuple[int, int]:
    """(errno, seq of the request it answers) of an NLMSG_ERROR; errno 0 is an ack."""
    if len(payload) < NLMSGERR.size + NLMSG_HDR.size:
        raise ValueError(f"NLMSG_ERROR of {len(payload)} bytes")
    (error,) = NLMSGERR.unpack_from(payload)
    _, _, _, seq, _ = NLMSG_HDR.unpack_from(payload, NLMSGERR.size)
    return -error, seq


# -- the impairment and its scheduler (pure) ----------------------------------------------
@dataclass(frozen=True)
class Impairment:
    """What happens to each packet: lost with probability ``loss_pct`` %, else released
    after a delay uniform in ``[delay_ms - jitter_ms, delay_ms + jitter_ms]``, clamped at 0."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0

    def __post_init__(self) -> None:
        for name in ("delay_ms", "jitter_ms", "loss_pct"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise FleetError(f"impair: {name} = {value!r}: must be a number >= 0")
        if self.loss_pct > 100:
            raise FleetError(f"impair: loss_pct = {self.loss_pct!r}: must be <= 100")

    def describe(self) -> str:
        return f"delay {self.delay_ms:g} ms jitter {self.jitter_ms:g} ms loss {self.loss_pct:g} %"


def draw(impairment: Impairment, rng: random.Random) -> int | None:
    """One packet's fate: None (dropped) or its delay in ns.

    Draws from ``rng`` in this order, so that a seed replays: ``rng.random()`` for the
    loss (only if ``loss_pct > 0``; dropped when below ``loss_pct / 100``), then
    ``rng.uniform(delay - jitter, delay + jitter)`` (only for a kept packet and
    ``jitter_ms > 0``)."""
    if impairment.loss_pct > 0 and rng.random() < impairment.loss_pct / 100.0:
        return None
    delay_ms = impairment.delay_ms
    if impairment.jitter_ms > 0:
        delay_ms = rng.uniform(delay_ms - impairment.jitter_ms, delay_ms + impairment.jitter_ms)
    return max(0, round(delay_ms * 1_000_000))


@dataclass
class Counts:
    """What the impairer did: packets seen, dropped, released after a delay > 0, and the
    times the kernel could not hand a packet over (ENOBUFS: that packet passed unseen)."""

    packets: int = 0
    dropped: int = 0
    delayed: int = 0
    enobufs: int = 0

    def to_line(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_line(cls, line: str) -> Counts:
        """The counts of the impairer's last output line (KeyError/ValueError if not)."""
        raw = json.loads(line)
        return cls(**{k: int(raw[k]) for k in ("packets", "dropped", "delayed", "enobufs")})


@dataclass
class Scheduler:
    """Packets held until their release time; the socket-free half of the impairer."""

    impairment: Impairment
    seed: int | None = None
    counts: Counts = field(default_factory=Counts)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._held: list[tuple[int, int, int]] = []  # (release_ns, arrival order, packet id)
        self._order = 0

    def admit(self, packet_id: int, arrival_ns: int) -> int | None:
        """Decide packet ``packet_id``: None to drop it now, else its release time (ns, on
        the clock of ``arrival_ns``); a kept packet is held until ``due`` returns it."""
        self.counts.packets += 1
        delay_ns = draw(self.impairment, self._rng)
        if delay_ns is None:
            self.counts.dropped += 1
            return None
        if delay_ns > 0:
            self.counts.delayed += 1
        release_ns = arrival_ns + delay_ns
        heapq.heappush(self._held, (release_ns, self._order, packet_id))
        self._order += 1
        return release_ns

    def due(self, now_ns: int) -> list[int]:
        """The held packets whose release time is ``now_ns`` or earlier, earliest first
        (ties in arrival order); they are no longer held."""
        out = []
        held = self._held
        while held and held[0][0] <= now_ns:
            out.append(heapq.heappop(held)[2])
        return out

    def next_release_ns(self) -> int | None:
        return self._held[0][0] if self._held else None

    def release_all(self) -> list[int]:
        """Every held packet, in release order; nothing is held afterwards."""
        out = [entry[2] for entry in sorted(self._held)]
        self._held.clear()
        return out

    @property
    def held(self) -> int:
        return len(self._held)


# -- the iptables rule -------------------------------------------------------------------
def comment(queue: int) -> str:
    return f"{COMMENT_PREFIX}{queue}"


def check_dev(dev: str) -> str:
    """``dev`` if it names one device other than loopback, else FleetError."""
    if not DEV_RE.match(dev):
        raise FleetError(
            f"impair: device {dev!r}: not an interface name (1-15 letters, digits, _.:@-; "
            "no wildcard)"
        )
    if dev == "lo":
        raise FleetError("impair: device 'lo': loopback is never impaired (name the host's link)")
    return dev


def check_queue(queue: int) -> int:
    if not 0 <= queue <= MAX_QUEUE:
        raise FleetError(f"impair: queue {queue}: must be 0..{MAX_QUEUE}")
    return queue


def rule_spec(dev: str, queue: int) -> list[str]:
    """The rule, chain first, as ``iptables -S`` prints it (what ``-I``/``-D`` take)."""
    return [
        CHAIN,
        "-o",
        check_dev(dev),
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


def add_command(dev: str, queue: int) -> list[str]:
    """``iptables -w -I OUTPUT -o DEV -m comment --comment mqlab-impair-N -j NFQUEUE
    --queue-num N --queue-bypass``."""
    return [IPTABLES, "-w", "-I", *rule_spec(dev, queue)]


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


def add_rule(dev: str, queue: int) -> None:
    """Insert the rule that queues this namespace's IPv4 egress on ``dev`` to ``queue``."""
    _iptables(add_command(dev, queue), f"adding the rule for {dev} (queue {queue})")


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


# -- the nfnetlink_queue client ------------------------------------------------------------
def _errno_name(err: int) -> str:
    return f"{errno.errorcode.get(err, str(err))} ({os.strerror(err)})"


class Transport(Protocol):
    """What NfQueue needs of its netlink socket (non-blocking)."""

    def send(self, data: bytes, /) -> int: ...

    def recv_into(self, buffer: bytearray, /) -> int: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...


class NfQueue:
    """One bound nfnetlink queue: read queued packets' ids, send verdicts."""

    def __init__(self, queue: int, sock: Transport):
        self.queue = check_queue(queue)
        self.sock = sock
        self.enobufs = 0
        self.verdict_errors = 0
        self._seq = 0
        self._buf = bytearray(RECV_BYTES)

    @classmethod
    def open(cls, queue: int, maxlen: int = QUEUE_MAXLEN) -> NfQueue:
        """A netlink socket bound to ``queue`` (metadata only, ``maxlen``, fail-open)."""
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        except OSError as e:
            raise FleetError(
                f"impair: no nfnetlink socket: {e.strerror} (the kernel needs "
                "CONFIG_NETFILTER_NETLINK_QUEUE)"
            ) from None
        try:
            try:  # root may exceed net.core.rmem_max
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            sock.bind((0, 0))
            sock.setblocking(False)
            nfq = cls(queue, sock)
            nfq.bind(maxlen)
        except BaseException:
            sock.close()
            raise
        return nfq

    def bind(self, maxlen: int = QUEUE_MAXLEN) -> None:
        """Bind the queue to this socket and configure it; each step waits for its ack."""
        self._request(bind_request, f"binding queue {self.queue}")
        self._request(
            lambda q, seq: params_request(q, seq, maxlen), f"configuring queue {self.queue}"
        )

    def fileno(self) -> int:
        return self.sock.fileno()

    def _request(self, build: Callable[[int, int], bytes], doing: str) -> None:
        self._seq += 1
        seq = self._seq
        self.sock.send(build(self.queue, seq))
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FleetError(f"impair: {doing}: the kernel did not answer")
            select.select([self.sock.fileno()], [], [], left)
            answer: int | None = None
            for msg in self._read_messages():
                if msg.type == NLMSG_ERROR:
                    err, ack_seq = parse_error(msg.payload)
                    if ack_seq == seq:
                        answer = err
                elif msg.type == queue_msg_type(NFQNL_MSG_PACKET):  # a leftover rule's packet
                    self.verdicts([parse_packet(msg.payload).packet_id], NF_ACCEPT)
            if answer == 0:
                return
            if answer is not None:
                raise FleetError(f"impair: {doing}: {_errno_name(answer)} ({_fix_for(answer)})")

    def _read_messages(self) -> list[NlMessage]:
        """The messages of every datagram waiting now (none if none); ENOBUFS is counted."""
        out: list[NlMessage] = []
        for _ in range(RECV_BATCH):
            try:
                n = self.sock.recv_into(self._buf)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self.enobufs += 1
                    continue
                raise
            out.extend(split_messages(memoryview(self._buf)[:n]))
        return out

    def receive(self) -> list[int]:
        """Ids of the packets queued since the last call (reads what is waiting, without
        blocking); error answers to verdicts are counted and logged."""
        ids = []
        packet_type = queue_msg_type(NFQNL_MSG_PACKET)
        for msg in self._read_messages():
            if msg.type == packet_type:
                ids.append(parse_packet(msg.payload).packet_id)
            elif msg.type == NLMSG_ERROR:
                err, _ = parse_error(msg.payload)
                if err:
                    self.verdict_errors += 1
                    LOG.warning("queue %d: a verdict failed: %s", self.queue, _errno_name(err))
        return ids

    def verdicts(self, packet_ids: Iterable[int], verdict: int) -> None:
        """``verdict`` for each packet, several verdicts to one datagram."""
        msgs = [verdict_message(self.queue, pid, verdict) for pid in packet_ids]
        for i in range(0, len(msgs), VERDICTS_PER_SEND):
            try:
                self.sock.send(b"".join(msgs[i : i + VERDICTS_PER_SEND]))
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                self.enobufs += 1

    def close(self) -> None:
        """Unbind (closing the socket): the kernel drops what it still holds for us."""
        self.sock.close()


def _fix_for(err: int) -> str:
    if err in (errno.EPERM, errno.EBUSY) and os.geteuid() == 0:
        # the kernel answers EPERM to a bind of a queue another socket holds
        return "another process holds this queue in this network namespace: pick another queue"
    if err == errno.EPERM:
        return "binding a queue needs root (CAP_NET_ADMIN) in this network namespace"
    if err in (errno.EOPNOTSUPP, errno.EPROTONOSUPPORT, errno.ENOENT):
        return "the kernel needs CONFIG_NETFILTER_NETLINK_QUEUE"
    return "is nfnetlink_queue available in this kernel?"


# -- the loop --------------------------------------------------------------------------------
def serve(
    nfq: NfQueue,
    scheduler: Scheduler,
    stop_fds: Sequence[int],
    clock: Callable[[], int] = time.monotonic_ns,
) -> None:
    """Impair until one of ``stop_fds`` is readable; held packets stay held.

    One thread: select on the queue and ``stop_fds`` until the next release is due,
    release what is due, admit what arrived (drop verdicts at once), and again."""
    fds = [nfq.fileno(), *stop_fds]
    while True:
        due = scheduler.due(clock())
        if due:
            nfq.verdicts(due, NF_ACCEPT)
        nxt = scheduler.next_release_ns()
        timeout = None if nxt is None else max(0.0, (nxt - clock()) / 1e9)
        readable, _, _ = select.select(fds, [], [], timeout)
        if any(fd in readable for fd in stop_fds):
            return
        if nfq.fileno() not in readable:
            continue
        ids = nfq.receive()
        if not ids:
            continue
        now = clock()
        dropped = [pid for pid in ids if scheduler.admit(pid, now) is None]
        if dropped:
            nfq.verdicts(dropped, NF_DROP)


def finish(nfq: NfQueue, scheduler: Scheduler, grace_s: float = GRACE_S) -> None:
    """After the rule is gone: accept every held packet and whatever still reaches the
    queue within ``grace_s`` (counted as packets, released at once)."""
    nfq.verdicts(scheduler.release_all(), NF_ACCEPT)
    deadline = time.monotonic() + grace_s
    while True:
        ids = nfq.receive()
        scheduler.counts.packets += len(ids)
        nfq.verdicts(ids, NF_ACCEPT)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        select.select([nfq.fileno()], [], [], left)


# -- the command line ----------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise FleetError(f"impair: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m mqlab.faults.impairer.netlink",
        description="Delay, jitter and loss on this namespace's IPv4 egress on one device "
        "(NFQUEUE, in userspace). Prints 'ready', then a JSON line of counts at the end.",
    )
    p.add_argument("--dev", help="the link to impair (its egress), e.g. eth0")
    p.add_argument("--queue", type=int, help=f"NFQUEUE number, 0..{MAX_QUEUE}")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--loss-pct", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None, help="seed of the loss and jitter draws")
    p.add_argument(
        "--remove-only",
        action="store_true",
        help="remove mqlab's leftover rules (of --queue only, if given) and exit",
    )
    return p


@dataclass(frozen=True)
class Options:
    """Impair ``dev`` through ``queue``."""

    dev: str
    queue: int
    impairment: Impairment
    seed: int | None = None


@dataclass(frozen=True)
class RemoveOnly:
    """Remove mqlab's rules (of ``queue`` only, unless None) and exit."""

    queue: int | None = None


def parse_args(argv: Sequence[str]) -> Options | RemoveOnly:
    """The CLI's options; FleetError (one line) on a malformed flag or a bad value."""
    a = _parser().parse_args(list(argv))
    if a.queue is not None:
        check_queue(a.queue)
    if a.remove_only:
        return RemoveOnly(a.queue)
    if a.dev is None or a.queue is None:
        raise FleetError("impair: --dev and --queue are required (or --remove-only)")
    for flag, value in (
        ("--delay-ms", a.delay_ms),
        ("--jitter-ms", a.jitter_ms),
        ("--loss-pct", a.loss_pct),
    ):
        if not math.isfinite(value) or value < 0:
            raise FleetError(f"impair: {flag} {value:g}: must be a number >= 0")
    if a.loss_pct > 100:
        raise FleetError(f"impair: --loss-pct {a.loss_pct:g}: must be at most 100")
    impairment = Impairment(a.delay_ms, a.jitter_ms, a.loss_pct)
    return Options(check_dev(a.dev), a.queue, impairment, a.seed)


def command(
    dev: str,
    queue: int,
    impairment: Impairment,
    seed: int | None = None,
    python: str = "python3",
) -> list[str]:
    """The command line that impairs ``dev`` in the namespace it runs in."""
    cmd = [python, "-m", "mqlab.faults.impairer.netlink", "--dev", check_dev(dev)]
    cmd += ["--queue", str(check_queue(queue))]
    cmd += ["--delay-ms", f"{impairment.delay_ms!r}", "--jitter-ms", f"{impairment.jitter_ms!r}"]
    cmd += ["--loss-pct", f"{impairment.loss_pct!r}"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd


def remove_only_command(queue: int | None = None, python: str = "python3") -> list[str]:
    cmd = [python, "-m", "mqlab.faults.impairer.netlink", "--remove-only"]
    return cmd if queue is None else [*cmd, "--queue", str(check_queue(queue))]


def _stdin_fd() -> int | None:
    try:
        os.fstat(0)
    except OSError:
        return None  # no stdin at all: only a signal ends it
    return 0


def impair(opts: Options, out: TextIO) -> int:
    """Bind, add the rule, say ``ready``, impair until told to stop, clean up, count."""
    scheduler = Scheduler(opts.impairment, opts.seed)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    old_wakeup = signal.set_wakeup_fd(wake_w.fileno())
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    nfq: NfQueue | None = None
    code = EXIT_OK
    try:
        nfq = NfQueue.open(opts.queue)
        add_rule(opts.dev, opts.queue)
        try:
            print("ready", file=out, flush=True)
            stdin = _stdin_fd()
            stop_fds = [wake_r.fileno()] + ([] if stdin is None else [stdin])
            while not stopping:
                serve(nfq, scheduler, stop_fds)
                if stdin is not None and _stdin_ended(stdin):
                    break
                _drain(wake_r)
        finally:
            try:
                remove_rules(opts.queue)
            except FleetError as e:
                print(str(e), file=sys.stderr)
                code = EXIT_USAGE
            finish(nfq, scheduler)
            scheduler.counts.enobufs = nfq.enobufs
            print(scheduler.counts.to_line(), file=out, flush=True)
    finally:
        if nfq is not None:
            nfq.close()
        for s, handler in old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(old_wakeup)
        wake_r.close()
        wake_w.close()
    return code


def _stdin_ended(fd: int) -> bool:
    """Read what is on stdin (ignored); True at end of file."""
    r, _, _ = select.select([fd], [], [], 0)
    if not r:
        return False
    try:
        return os.read(fd, 4096) == b""
    except OSError:
        return True


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except BlockingIOError:
        pass


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """``python -m mqlab.faults.impairer.netlink ...``: exit 0 when done, 2 with one line on stderr
    for a bad argument or an environment problem."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="impair: %(message)s")
    out = out or sys.stdout
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        if isinstance(opts, RemoveOnly):
            remove_rules(opts.queue)
            return EXIT_OK
        return impair(opts, out)
    except FleetError as e:
        print(str(e), file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
