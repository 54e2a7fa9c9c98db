"""The nfnetlink_queue client (one bound queue: queued packets' ids in, verdicts out)
and the loop that impairs with it."""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from .common import (
    ACK_TIMEOUT_S,
    GRACE_S,
    QUEUE_MAXLEN,
    RCVBUF_BYTES,
    RECV_BATCH,
    RECV_BYTES,
    VERDICTS_PER_SEND,
    FleetError,
    check_queue,
)
from .delay import Scheduler
from .netlink import (
    NETLINK_NETFILTER,
    NF_ACCEPT,
    NF_DROP,
    NFQNL_MSG_PACKET,
    NLMSG_ERROR,
    SO_RCVBUFFORCE,
    NlMessage,
    bind_request,
    params_request,
    parse_error,
    parse_packet,
    queue_msg_type,
    split_messages,
    verdict_message,
)

LOG = logging.getLogger(__name__)


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
