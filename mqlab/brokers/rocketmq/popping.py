"""RocketMQ's pops and acks on the remoting protocol (``remoting.py`` has the frames, the
connections and the send side): a pop's stored messages decoded (``decode_messages``),
their receipts as the Java client builds them (``popped``) or, for receivers in lanes,
their headers and batch-ack entries without an object per message (``popped_headers``);
POP_MESSAGE requests (``pop_header``, ``PopFrames``) and BATCH_ACK_MESSAGE bodies
(``ack_bits``, ``ack_body``). Layouts and fields as ``remoting.py``'s docstring says."""

from __future__ import annotations

import base64
import json
import struct
import time
import zlib
from collections.abc import Iterable
from typing import NamedTuple

from mqlab.brokers import compiled
from mqlab.brokers.rocketmq.remoting import (
    MAGIC_V1,
    MAGIC_V2,
    NAME_VALUE,
    POP_MESSAGE,
    PROPERTY_END,
    RETRY_PREFIX,
    SYSFLAG_BORN_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_STORE_V6,
    VERSION,
    Answer,
)
from mqlab.errors import DriverError

# a stored message: size, magic, crc, queue, flag, queue offset, commit log offset, sysFlag,
# born time; with IPv4 hosts, then born host, store time, store host (skipped), reconsume
# times, prepared transaction offset (skipped) and the body's length
_FIXED = struct.Struct(">iiiiiqqiq")
_STORED_V4 = struct.Struct(">iiiiiqqi8x8x8x8xi8xi")
_TAIL = struct.Struct(">iqi")  # reconsume times, prepared transaction offset, body length
_SHORT = struct.Struct(">h")
_LENGTHS = struct.Struct(">ii")  # a frame's length, its header's length
# a message popped from the group's retry topic comes with its original topic and its
# receipt made by the broker in this property (its retry flag 1: the ack names the retry
# topic); the Java client keeps it (``processPopResponse``)
POP_CK_PROPERTY = f"POP_CK{NAME_VALUE}".encode()


# what a batch ack groups messages by: (retry flag, queue id, checkpoint offset, pop time,
# revive queue id, invisible time), a receipt's fields
Checkpoint = tuple[str, int, int, int, int, int]


class Popped(NamedTuple):
    """One popped message: its body, whether the broker delivered it before, what its
    ack names (topic, queue id, queue offset) and its receipt (the Java client's
    ``POP_CK``: ``ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName
    queueId queueOffset``)."""

    body: bytes
    redelivered: bool
    topic: str
    queue_id: int
    offset: int
    receipt: str
    checkpoint: Checkpoint  # what its batch ack groups it by


class Stored(NamedTuple):
    topic: str
    queue_id: int
    offset: int
    reconsume: int
    body: bytes
    pop_ck: str | None = None


def _property(props: bytes, name: bytes) -> str | None:
    """The value of property ``name`` (given with its separator) in ``props``, or None."""
    at = props.find(name)
    if at < 0 or (at > 0 and props[at - 1 : at] != PROPERTY_END.encode()):
        return None
    start = at + len(name)
    stop = props.find(PROPERTY_END.encode(), start)
    return props[start : stop if stop >= 0 else len(props)].decode()


def decode_messages(data: bytes) -> list[Stored]:
    """The stored messages of a pop's body, in order (``MessageDecoder.decode``'s
    layout; a compressed body, flagged in sysFlag, is inflated as zlib), with the
    receipt a revived message carries (``POP_CK_PROPERTY``). Messages whose hosts are
    IPv4 (the common case) are read with one unpack up to their body."""
    out = []
    pos, end = 0, len(data)
    unpack4, head4 = _STORED_V4.unpack_from, _STORED_V4.size
    while pos < end:
        if end - pos < head4:
            raise DriverError(f"rocketmq: a popped message cut short at byte {pos} of {end}")
        size, magic, _crc, queue_id, _flag, qoff, _poff, sysflag, reconsume, blen = unpack4(
            data, pos
        )
        if size <= head4 or pos + size > end:
            raise DriverError(f"rocketmq: a popped message of {size} bytes at byte {pos} of {end}")
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            raise DriverError(f"rocketmq: a popped message with magic code {magic}")
        if sysflag & (SYSFLAG_BORN_V6 | SYSFLAG_STORE_V6):
            p = pos + _FIXED.size
            p += 20 if sysflag & SYSFLAG_BORN_V6 else 8  # born host
            p += 8  # store timestamp
            p += 20 if sysflag & SYSFLAG_STORE_V6 else 8  # store host
            reconsume, _prepared, blen = _TAIL.unpack_from(data, p)
            p += _TAIL.size
        else:
            p = pos + head4
        if p + blen > pos + size:
            raise DriverError(f"rocketmq: a popped message's body overruns it at byte {pos}")
        body = data[p : p + blen]
        p += blen
        if sysflag & SYSFLAG_COMPRESSED:
            body = zlib.decompress(body)
        if magic == MAGIC_V2:
            (tlen,) = _SHORT.unpack_from(data, p)
            p += 2
        else:
            tlen = data[p]
            p += 1
        topic = data[p : p + tlen].decode()
        p += tlen
        ck = None
        if reconsume:
            (plen,) = _SHORT.unpack_from(data, p)
            ck = _property(data[p + 2 : p + 2 + plen], POP_CK_PROPERTY)
        out.append(Stored(topic, queue_id, qoff, reconsume, body, ck))
        pos += size
    return out


def _start_offsets(text: str) -> dict[str, int]:
    """``startOffsetInfo``: ``retryFlag queueId offset`` entries joined by ``;``, keyed
    ``retryFlag@queueId``."""
    out: dict[str, int] = {}
    for entry in filter(None, text.split(";")):
        parts = entry.split(" ")
        if len(parts) != 3:
            raise DriverError(f"rocketmq: unreadable pop offsets {entry!r}")
        out[f"{parts[0]}@{parts[1]}"] = int(parts[2])
    return out


def retry_flag(topic: str) -> str:
    return "1" if topic.startswith(RETRY_PREFIX) else "0"


def ack_topic(flag: str, topic: str, group: str) -> str:
    """The topic a popped message was stored in (``Popped.topic``): the group's retry
    topic for a message revived from it (retry flag 1, or 2 for the broker's second naming
    scheme), else ``topic`` (``ExtraInfoUtil.getRealTopic``,
    ``KeyBuilder.buildPopRetryTopic``). A batch ack names ``topic`` and the flag instead."""
    if topic.startswith(RETRY_PREFIX) or flag not in ("1", "2"):
        return topic
    return f"{RETRY_PREFIX}{group}{'_' if flag == '1' else '+'}{topic}"


def popped(answer: Answer, broker_name: str, group: str) -> list[Popped]:
    """The messages of a successful pop, each with its receipt as the Java client builds
    it (``processPopResponse``): the one a revived message carries, else from the
    answer's checkpoint fields (its queue's first offset in this pop, from
    ``startOffsetInfo``, and the message's own offset, which ``msgOffsetInfo`` lists
    too)."""
    checkpoints = _Checkpoints(answer)
    common = checkpoints.common
    out = []
    # per (topic, queue id) of this pop: its receipt's prefix and its checkpoint, made once
    queues: dict[tuple[str, int], tuple[str, Checkpoint]] = {}
    for m in decode_messages(answer.body):
        if m.pop_ck is not None:
            topic, q, offset, cp = _revived(m.pop_ck, m.topic, group)
            out.append(Popped(m.body, True, topic, q, offset, m.pop_ck, cp))
            continue
        known = queues.get((m.topic, m.queue_id))
        if known is None:
            cp = checkpoints.of(m)
            prefix = f"{cp[2]}{common}{cp[0]} {broker_name} {m.queue_id} "
            known = queues[(m.topic, m.queue_id)] = (prefix, cp)
        receipt = known[0] + str(m.offset)
        out.append(
            Popped(m.body, m.reconsume > 0, m.topic, m.queue_id, m.offset, receipt, known[1])
        )
    return out


class PoppedHeaders(NamedTuple):
    """A pop's messages as receivers in lanes take them: no receipt or object per message,
    their headers and their batch ack's entries."""

    headers: bytes  # each message's first header bytes, in order (one shorter left out)
    messages: int  # how many were popped
    short: list[int]  # which (their index in the pop) were shorter than a header
    redelivered: list[int]  # which the broker had delivered before
    bits: dict[Checkpoint, int]  # their batch ack's entries (``ack_bits``)


def popped_headers(answer: Answer, group: str, header_bytes: int) -> PoppedHeaders:
    """``popped``'s messages as ``PoppedHeaders``, with the same checkpoints. An answer
    whose every message has IPv4 hosts, is stored uncompressed and popped for the first
    time (the common case) is read in C where it is built (``mqlab._recvpath``'s
    ``rocketmq_popped``, mqlab/_rocketmqpop.h): one call, no object per message. Any
    other answer is read here: such a message with one unpack, its header sliced from
    the answer, no body copied; any other through ``decode_messages`` (2.8 us a message
    for ``popped``, its record and its batch ack; 1.3 this way, 2026-11-30)."""
    checkpoints = _Checkpoints(answer)
    data = answer.body
    if compiled.recv_module is not None:
        plain = compiled.recv_module.rocketmq_popped(data, header_bytes)
        if plain is not None:
            return _plain_headers(checkpoints, *plain)
    headers: list[bytes] = []
    short: list[int] = []
    redelivered: list[int] = []
    bits: dict[Checkpoint, int] = {}
    queues: dict[tuple[bytes, int], Checkpoint] = {}  # (topic, queue id) -> its checkpoint
    unpack4, head4 = _STORED_V4.unpack_from, _STORED_V4.size
    odd = SYSFLAG_BORN_V6 | SYSFLAG_STORE_V6 | SYSFLAG_COMPRESSED
    pos, end, i = 0, len(data), 0
    while pos < end:
        if end - pos < head4:
            raise DriverError(f"rocketmq: a popped message cut short at byte {pos} of {end}")
        size, magic, _crc, queue_id, _flag, offset, _p, sysflag, again, blen = unpack4(data, pos)
        if size <= head4 or pos + size > end:
            raise DriverError(f"rocketmq: a popped message of {size} bytes at byte {pos} of {end}")
        t = pos + head4 + blen  # its topic's length, then its topic
        if (
            again
            or sysflag & odd
            or magic != MAGIC_V1
            or blen < 0
            or t >= pos + size
            or t + 1 + data[t] > pos + size
        ):
            (m,) = decode_messages(data[pos : pos + size])
            if len(m.body) < header_bytes:
                short.append(i)
            else:
                headers.append(m.body[:header_bytes])
            if m.pop_ck is not None:
                _topic, _queue, offset, cp = _revived(m.pop_ck, m.topic, group)
            else:
                offset, cp = m.offset, checkpoints.of(m)
            if m.pop_ck is not None or m.reconsume:
                redelivered.append(i)
        else:
            if blen < header_bytes:
                short.append(i)
            else:
                headers.append(data[pos + head4 : pos + head4 + header_bytes])
            key = (data[t + 1 : t + 1 + data[t]], queue_id)
            cp = queues.get(key) or queues.setdefault(
                key, checkpoints.of(Stored(key[0].decode(), queue_id, offset, 0, b""))
            )
        bit = offset - cp[2]
        if bit < 0:
            raise DriverError(f"rocketmq: a popped message's offset {offset} is before {cp}")
        bits[cp] = bits.get(cp, 0) | 1 << bit
        pos += size
        i += 1
    return PoppedHeaders(b"".join(headers), i, short, redelivered, bits)


def _plain_headers(
    checkpoints: _Checkpoints,
    headers: bytes,
    messages: int,
    short: list[int],
    queues: list[tuple[bytes, int, int, int]],
) -> PoppedHeaders:
    """What ``rocketmq_popped`` read, with each queue's bits moved to its checkpoint."""
    bits: dict[Checkpoint, int] = {}
    for topic, queue_id, first, got in queues:
        cp = checkpoints.of(Stored(topic.decode(), queue_id, first, 0, b""))
        if first < cp[2]:
            raise DriverError(f"rocketmq: a popped message's offset {first} is before {cp}")
        bits[cp] = bits.get(cp, 0) | got << (first - cp[2])
    return PoppedHeaders(headers, messages, short, [], bits)


class _Checkpoints:
    """A pop answer's checkpoint fields: each queue's checkpoint (its first offset in the
    pop, from ``startOffsetInfo``, else its first message's)."""

    def __init__(self, answer: Answer):
        ext = answer.ext
        try:
            self.pop_time, self.invisible = int(ext["popTime"]), int(ext["invisibleTime"])
            self.revive = int(ext["reviveQid"])
        except (KeyError, ValueError) as e:
            raise DriverError(
                f"rocketmq: a pop answer without its checkpoint fields: {e}"
            ) from None
        self.starts = _start_offsets(ext.get("startOffsetInfo") or "")
        self.common = f" {self.pop_time} {self.invisible} {self.revive} "

    def of(self, m: Stored) -> Checkpoint:
        """The checkpoint of a message popped from ``m.topic`` (not revived)."""
        flag = retry_flag(m.topic)
        key = f"{flag}@{m.queue_id}"
        ck = self.starts.get(key)
        if ck is None:  # no checkpoint fields: the queue's first offset here is it
            ck = self.starts[key] = m.offset
        return (flag, m.queue_id, ck, self.pop_time, self.revive, self.invisible)


def _revived(pop_ck: str, topic: str, group: str) -> tuple[str, int, int, Checkpoint]:
    """A revived message's receipt (``POP_CK``): the topic it was stored in, its queue id,
    its offset and its checkpoint."""
    fields = pop_ck.split(" ")
    if len(fields) != 8:
        raise DriverError(f"rocketmq: a popped message's receipt {pop_ck!r} unreadable")
    cp = (fields[4], int(fields[6]), int(fields[0]), int(fields[1]), int(fields[3]), int(fields[2]))
    return ack_topic(fields[4], topic, group), cp[1], int(fields[7]), cp


def pop_header(
    group: str, topic: str, max_messages: int, invisible_ms: int, poll_ms: int
) -> dict[str, str]:
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "-1",
        "maxMsgNums": str(max_messages),
        "invisibleTime": str(invisible_ms),
        "pollTime": str(poll_ms),
        "bornTime": str(int(time.time() * 1000)),
        "initMode": "0",
        "expType": "TAG",
        "exp": "*",
        "order": "false",
    }


class PopFrames:
    """One receiver's POP_MESSAGE requests, ``frame(POP_MESSAGE, pop_header(...), opaque)``
    each, with the header's JSON written once but for what changes per pop (how many, the
    long poll, the born time, the opaque): encoding the whole header per pop, with the
    batch ack's JSON, was about a tenth of the receivers' time in lanes (py-spy,
    2026-11-30)."""

    def __init__(self, group: str, topic: str, invisible_ms: int):
        fixed = pop_header(group, topic, 0, invisible_ms, 0)
        for changing in ("maxMsgNums", "pollTime", "bornTime"):
            del fixed[changing]
        ext = json.dumps(fixed, separators=(",", ":"))[:-1]  # its closing brace left off
        self._head = (
            f'{{"code":{POP_MESSAGE},"language":"PYTHON","version":{VERSION},"flag":0,'
            f'"serializeTypeCurrentRPC":"JSON","extFields":{ext},'
        )

    def frame(self, max_messages: int, poll_ms: int, opaque: int) -> bytes:
        born = int(time.time() * 1000)
        header = (
            f'{self._head}"maxMsgNums":"{max_messages}","pollTime":"{poll_ms}",'
            f'"bornTime":"{born}"}},"opaque":{opaque}}}'
        ).encode()
        return _LENGTHS.pack(4 + len(header), len(header)) + header


def batch_ack_body(broker_name: str, group: str, topic: str, messages: Iterable[Popped]) -> bytes:
    """BATCH_ACK_MESSAGE's body for ``messages`` (popped from ``topic`` or the group's retry
    topic): one entry per checkpoint (retry flag, queue, checkpoint offset, pop time) with
    a bit per message, bit i for offset ``so + i`` (``BatchAck``: ``b`` is
    ``BitSet.toByteArray`` in base64, little-endian). Every entry names ``topic`` itself
    and its retry flag: the broker finds the retry topic from those (an entry naming the
    retry topic is answered SUCCESS and acks nothing, tried here 2026-11-29)."""
    return ack_body(broker_name, group, topic, ack_bits(messages))


def ack_bits(
    messages: Iterable[Popped], into: dict[Checkpoint, int] | None = None
) -> dict[Checkpoint, int]:
    """``messages`` as a batch ack's entries: checkpoint -> a bit per message (bit i: offset
    ``so + i``), added to ``into`` if given."""
    bits: dict[Checkpoint, int] = {} if into is None else into
    for m in messages:
        cp = m.checkpoint
        bit = m.offset - cp[2]
        if bit < 0:
            raise DriverError(
                f"rocketmq: receipt {m.receipt!r} names an offset before its checkpoint"
            )
        bits[cp] = bits.get(cp, 0) | 1 << bit
    return bits


def ack_body(broker_name: str, group: str, topic: str, bits: dict[Checkpoint, int]) -> bytes:
    """BATCH_ACK_MESSAGE's body for ``bits`` (``ack_bits``; ``batch_ack_body`` says the
    rest)."""
    # the JSON written out (json.dumps of the same dicts was a third of the ack's cost)
    named = f'{{"c":{json.dumps(group)},"t":{json.dumps(topic)},"r":'
    entries = []
    for (flag, queue, ck, pop_time, revive, invisible), b in bits.items():
        encoded = base64.b64encode(b.to_bytes((b.bit_length() + 7) // 8, "little")).decode()
        entries.append(
            f'{named}{json.dumps(flag)},"so":{ck},"q":{queue},"rq":{revive},'
            f'"pt":{pop_time},"it":{invisible},"b":"{encoded}"}}'
        )
    return f'{{"brokerName":{json.dumps(broker_name)},"acks":[{",".join(entries)}]}}'.encode()
