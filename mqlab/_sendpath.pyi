"""Types of the compiled send path (mqlab/_sendpath.c: what each argument means)."""

from typing import Any

def redis_batch(
    fd: int,
    template: Any,  # a writable buffer: the batch's wire bytes (envelope.Framed)
    spec: bytes,  # SPEC (mqlab.brokers.redis.driver) then the trailer
    n: int,
    first_seq: int,
    sent_ns: int,
    /,
) -> tuple[int, int, str | None]: ...
def redis_lanes(
    lanes: list[tuple[int, tuple[Any, ...], Any, int, int, Any]],
    # each (fd, run_spec, sizes: a buffer of i64, first_seq, key, records: a writable
    # buffer of 2 i64 per batch); run_spec: (prefixes, pads, pool_n, suffix, trailer,
    # magic, version, sender, min_acks)
    until_ns: int,
    wall_offset_ns: int,
    timeout_ns: int,
    /,
) -> list[tuple[int, tuple[int, int, str | None]]]: ...
def pg_lanes(
    lanes: list[tuple[int, tuple[Any, ...], Any, int, int, Any]],
    # each (fd, run_spec, sizes, first_seq, key (unused), records); run_spec: (statement
    # name before the batch size, pads, pool_n, magic, version, sender)
    until_ns: int,
    wall_offset_ns: int,
    timeout_ns: int,
    /,
) -> list[tuple[int, tuple[int, int, str | None]]]: ...
