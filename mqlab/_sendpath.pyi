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

REDIS: int
PG: int
NATS: int
PULSAR: int
WINDOW: int  # a fixed-rate Redis or PostgreSQL lane's batches in flight, at most

class Lanes:
    """Senders' connections driven from one thread (mqlab/_sendpath.c)."""

    def __init__(self, proto: int, count: int, timeout_ns: int) -> None: ...
    def assign(
        self,
        j: int,
        fd: int,
        run_spec: tuple[Any, ...],
        # Redis: (prefixes, pads, pool_n, suffix, trailer, magic, version, sender,
        # min_acks); PostgreSQL: (statement name before the batch size, the INSERT's SQL
        # up to its rows, pads, pool_n, magic, version, sender); NATS: (subject, inbox,
        # pads, pool_n, magic, version, sender, resend_wait_ns); Pulsar: (producer name,
        # producer id, pads, pool_n, magic, version, sender)
        sizes: Any,  # a buffer of i64 batch sizes
        first_seq: int,
        key: int,
        records: Any,  # a writable buffer of 2 i64 per batch
        first_start_ns: int,  # > 0: the first batch started then
        conn_gen: int,  # the connection's generation (PostgreSQL: what it prepared)
        slots: Any = None,  # fixed rate: a buffer of each batch's i64 slot (monotonic ns)
        /,
    ) -> None: ...
    def run(
        self, return_ns: int, stop_ns: int, wall_offset_ns: int, wake_fd: int, /
    ) -> list[tuple[int, int, tuple[int, int, str | None] | None]]:
        """Per lane: (done, in_flight, outcome): batches confirmed; batches in flight
        from batch done on (at a failure: those in flight behind the failed one); None,
        or the failure's (status, integer, message)."""
    def release(self, j: int, /) -> None: ...
