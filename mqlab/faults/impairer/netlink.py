"""The nfnetlink wire format (include/uapi/linux/netlink.h, netfilter/nfnetlink*.h):
pure packing and parsing."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from .common import QUEUE_MAXLEN

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
