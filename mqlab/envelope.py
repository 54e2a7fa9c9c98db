"""The fixed binary header every message carries, and payload padding.

Layout (little endian, 24 bytes): magic u16, header version u16, sender id u32,
sequence number u64, intended send time i64 (wall clock ns). The stamp is the
instant the schedule meant the message to go (fixed rate: its slot; closed loop:
when the batch began), converted once per sender thread from the monotonic
schedule to wall-clock ns (:func:`mqlab.clock.wall_ns`, the sender host's clock), so a
sender that falls behind cannot hide its delay from end-to-end latency. Receivers
correct for the difference between their host's clock and the sender host's
(:meth:`mqlab.workload.recorder.IntervalRecorder.correct_clocks`). The rest of the
message is padding from a pool of random payloads made at start.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Sequence

import numpy as np

MAGIC = 0x4D51  # "MQ"
VERSION = 2  # 2: the stamp is the intended send time
HEADER = struct.Struct("<HHIQq")
HEADER_BYTES = HEADER.size  # 24
HEADER_DTYPE = np.dtype(
    [("magic", "<u2"), ("version", "<u2"), ("sender", "<u4"), ("seq", "<u8"), ("sent_ns", "<i8")]
)
assert HEADER_DTYPE.itemsize == HEADER_BYTES


class EnvelopeError(ValueError):
    """A received message does not start with a valid mqlab header."""


class PayloadPool:
    """Random paddings made once at start so sending costs no random generation."""

    def __init__(self, message_bytes: int, pool_size: int = 64, seed: int | None = None):
        if message_bytes < HEADER_BYTES:
            raise ValueError(f"message_bytes must be >= {HEADER_BYTES} (the header size)")
        rng = random.Random(seed)
        pad = message_bytes - HEADER_BYTES
        self.message_bytes = message_bytes
        self._pads = [
            rng.randbytes(pad) if seed is not None else os.urandom(pad) for _ in range(pool_size)
        ]
        self._n = pool_size

    def pad(self, seq: int) -> bytes:
        return self._pads[seq % self._n]


def encode(sender: int, seq: int, sent_ns: int, pad: bytes) -> bytes:
    return HEADER.pack(MAGIC, VERSION, sender, seq, sent_ns) + pad


def encode_batch(
    sender: int, first_seq: int, n: int, sent_ns: int, pool: PayloadPool
) -> list[bytes]:
    """``n`` messages with consecutive sequence numbers, all stamped ``sent_ns`` (the
    batch's intended send time, wall clock ns)."""
    pack = HEADER.pack
    pad = pool._pads[first_seq % pool._n]  # one random padding per batch
    return [pack(MAGIC, VERSION, sender, s, sent_ns) + pad for s in range(first_seq, first_seq + n)]


class Framed:
    """Batches written straight into a protocol's wire bytes (each message between
    ``prefix`` and ``suffix``): the bytes :func:`encode_batch` makes, framed, without
    making them. For each padding of the pool, the wire bytes of a batch of the largest
    size seen so far are made once with room for the headers; a batch then costs one
    header write per message, and a batch of n is the first n frames. A template is
    reused once the send of its batch returned, so each sender thread has its own object
    and sends a batch before making the next. At most ``budget_bytes`` of templates are
    kept; past that, they are made again."""

    def __init__(
        self, pool: PayloadPool, prefix: bytes, suffix: bytes, budget_bytes: int = 8 << 20
    ):
        self.pool = pool
        self.prefix, self.suffix = prefix, suffix
        self.prefix_len = len(prefix)
        self.frame = len(prefix) + pool.message_bytes + len(suffix)
        self.budget_bytes = budget_bytes
        self.n_max = 0
        self.kept = 0  # templates kept at most
        self._templates: dict[int, memoryview] = {}

    def _template(self, pad_index: int, n: int) -> memoryview:
        if n > self.n_max:  # a larger batch than any before: templates of its size
            self.n_max = n
            self.kept = max(1, self.budget_bytes // (self.frame * n))
            self._templates.clear()
        elif len(self._templates) >= self.kept:
            self._templates.clear()
        one = self.prefix + bytes(HEADER_BYTES) + self.pool._pads[pad_index] + self.suffix
        t = self._templates[pad_index] = memoryview(bytearray(one * self.n_max))
        return t

    def template(self, first_seq: int, n: int) -> memoryview:
        """The wire bytes of at least ``n`` messages framed, padded as ``encode_batch``
        pads a batch from ``first_seq``, their headers still to be written (at
        ``prefix_len + i * frame``): for a compiled writer."""
        t = self._templates.get(first_seq % self.pool._n)
        if t is None or n > self.n_max:
            t = self._template(first_seq % self.pool._n, n)
        return t

    def batch(self, sender: int, first_seq: int, n: int, sent_ns: int) -> memoryview:
        """The wire bytes of ``encode_batch(sender, first_seq, n, sent_ns, pool)``,
        each message framed (valid until the next call)."""
        t = self.template(first_seq, n)
        pack_into, frame = HEADER.pack_into, self.frame
        offset = self.prefix_len
        for seq in range(first_seq, first_seq + n):
            pack_into(t, offset, MAGIC, VERSION, sender, seq, sent_ns)
            offset += frame
        return t[: n * frame]


def decode(message: bytes) -> tuple[int, int, int]:
    """(sender, seq, sent_ns) of one message."""
    if len(message) < HEADER_BYTES:
        raise EnvelopeError(f"message of {len(message)} bytes is shorter than the header")
    magic, version, sender, seq, sent_ns = HEADER.unpack_from(message)
    if magic != MAGIC or version != VERSION:
        raise EnvelopeError(f"bad header magic/version {magic:#x}/{version}")
    return sender, seq, sent_ns


def decode_many(headers: bytes | bytearray) -> np.ndarray:
    """Decode concatenated 24-byte headers into a structured array (vectorized); raises
    EnvelopeError if any is not an mqlab header (see :func:`split_foreign`)."""
    arr = np.frombuffer(headers, dtype=HEADER_DTYPE)
    if arr.size and not bool(np.all(valid(arr))):
        raise EnvelopeError("bad header magic/version in a received batch")
    return arr


def valid(arr: np.ndarray) -> np.ndarray:
    """Which decoded headers are mqlab headers of this version (a boolean mask)."""
    return (arr["magic"] == MAGIC) & (arr["version"] == VERSION)


def split_foreign(headers: bytes | bytearray) -> tuple[np.ndarray, np.ndarray]:
    """(all decoded headers, mask of the valid ones): a message that is not mqlab's, or
    corrupt, is left out by the mask instead of failing the whole batch."""
    arr = np.frombuffer(headers, dtype=HEADER_DTYPE)
    return arr, valid(arr)


def headers_of(messages: Sequence[bytes]) -> bytes:
    """The concatenated headers of ``messages`` (input to :func:`decode_many`)."""
    return b"".join([m[:HEADER_BYTES] for m in messages])
