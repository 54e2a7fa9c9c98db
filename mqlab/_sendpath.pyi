"""Types of the compiled send path (mqlab/_sendpath.c: what each argument means)."""

from typing import Any

def redis_batch(
    fd: int,
    template: Any,  # a writable buffer
    prefix_len: int,
    frame: int,
    n: int,
    magic: int,
    version: int,
    sender: int,
    first_seq: int,
    sent_ns: int,
    trailer: bytes,
    replies: int,
    /,
) -> tuple[int, int, str | None]: ...
