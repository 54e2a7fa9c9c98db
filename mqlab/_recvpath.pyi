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
