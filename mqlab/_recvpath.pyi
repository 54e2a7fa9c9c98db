"""Types of the compiled receive path (mqlab/_recvpath.c: what each argument means)."""

def pg_receive(
    fds: list[int],  # each receiver's socket, idle, the statement prepared on it
    # (statement name, limit, visibility s, poll cap ns, timeout ns, header bytes)
    spec: tuple[bytes, int, float, int, int, int],
    return_ns: int,  # monotonic
    wall_offset_ns: int,  # monotonic -> wall clock
    wake_fd: int,  # readable: return at once (after the last acks)
    /,
) -> list[tuple[bytes, bytes, bytes, bytes, int, int, int, int, str | None]]: ...
def kafka_records(
    records: bytes | memoryview,  # one partition's record set of a Fetch answer
    fetch_offset: int,  # the offset it was fetched from: records before it are passed over
    mark: int,  # the partition's delivered mark: records at or below it are flagged
    header_bytes: int,  # the part of each value kept
    /,
) -> tuple[bytes, int, int, int, int, int, int, int]:
    """(headers, received, short, flagged, next offset, first offset, skipped, first
    offset skipped): mqlab/_kafkarecords.h."""
    ...

def rocketmq_popped(
    body: bytes | memoryview,  # a successful pop answer's body: its stored messages
    header_bytes: int,  # the part of each body kept
    /,
) -> tuple[bytes, int, list[int], list[tuple[bytes, int, int, int]]] | None:
    """(headers, messages, short, queues: (topic, queue id, first offset, bits) each), or
    None where a message is not the common case: mqlab/_rocketmqpop.h."""
    ...
