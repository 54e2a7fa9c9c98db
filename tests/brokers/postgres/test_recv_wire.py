"""mqlab/_recvpath.c against a fake PostgreSQL server on a socket pair: the statements it
writes (each acking the last batch's ids, the last one with limit 0) and what it makes of
the replies (headers, redelivery flags, short rows, counts, errors)."""

from __future__ import annotations

import array
import os
import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest

from mqlab import envelope
from mqlab.brokers import compiled

pytestmark = pytest.mark.skipif(
    compiled.recv_module is None, reason="not built: tests/brokers/test_sendpath.py fails"
)
NAME = b"mqlab_ack_claim"
SPEC = (NAME, 10, 30.0, 100_000_000, 30_000_000_000, envelope.HEADER_BYTES)


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _row(row_id: int, payload: bytes, deliveries: int) -> bytes:
    body = struct.pack("!hiq", 3, 8, row_id) + struct.pack("!i", len(payload)) + payload
    return _message(b"D", body + struct.pack("!ii", 4, deliveries))


def _reply(rows: list[bytes]) -> bytes:
    done = _message(b"C", b"UPDATE %d\x00" % len(rows))
    return _message(b"2", b"") + b"".join(rows) + done + _message(b"Z", b"I")


def _read_statement(sock: socket.socket) -> tuple[list[int], int, float]:
    """One Bind, Execute, Sync: (the acked ids, the limit, the visibility seconds)."""
    data = b""
    while not data.endswith(_message(b"S", b"")):
        chunk = sock.recv(65536)
        assert chunk, "the client closed"
        data += chunk
    assert data[0:1] == b"B"
    (bind_len,) = struct.unpack_from("!i", data, 1)
    body = data[5 : 1 + bind_len]
    assert body[:1] == b"\x00" and body[1 : 1 + len(NAME) + 1] == NAME + b"\x00"
    at = 2 + len(NAME)
    assert struct.unpack_from("!hhh", body, at) == (1, 1, 3)
    at += 6
    (alen,) = struct.unpack_from("!i", body, at)
    dims, nulls, oid, n, lower = struct.unpack_from("!iiiii", body, at + 4)
    assert (dims, nulls, oid, lower) == (1, 0, 20, 1) and alen == 20 + 12 * n
    ids = [struct.unpack_from("!iq", body, at + 24 + 12 * i)[1] for i in range(n)]
    at += 4 + alen
    _, limit, _, visibility = struct.unpack_from("!iqid", body, at)
    assert data[1 + bind_len : 2 + bind_len] == b"E"
    return ids, limit, visibility


def _serve(script: Callable[[socket.socket, Callable[[], object]], None]) -> list:
    """pg_receive on one end of a socket pair, ``script`` playing the server on the other
    (it ends the call through the ``wake`` it is handed: a write to the wake pipe)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    rfd, wfd = os.pipe()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            script(theirs, lambda: os.write(wfd, b"x"))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)
            os.write(wfd, b"x")

    t = threading.Thread(target=run)
    t.start()
    try:
        assert compiled.recv_module is not None
        out = compiled.recv_module.pg_receive(
            [ours.fileno()], SPEC, time.monotonic_ns() + 60_000_000_000, 1000, rfd
        )
        t.join(30)
    finally:
        ours.close()
        theirs.close()
        os.close(rfd)
        os.close(wfd)
    assert not failures, failures
    return out


def _scripted(
    replies: list[bytes], wake_before: int
) -> tuple[Callable[[socket.socket, Callable[[], object]], None], list]:
    """A server that reads a statement before each of ``replies`` and sends it, ending the
    call (``wake``) before reply ``wake_before``, then reads the last statement (the ack
    alone) and answers it with no rows; and the statements it read (acked ids, limit,
    visibility)."""
    seen: list[tuple[list[int], int, float]] = []

    def server(sock: socket.socket, wake: Callable[[], object]) -> None:
        for i, reply in enumerate(replies):
            seen.append(_read_statement(sock))
            if i == wake_before:
                wake()
            sock.sendall(reply)
        seen.append(_read_statement(sock))  # the last: the ack alone
        sock.sendall(_reply([]))

    return server, seen


def _header_seqs(headers: bytes) -> list[int]:
    return [envelope.HEADER.unpack_from(headers, i)[3] for i in range(0, len(headers), 24)]


def _payload(seq: int) -> bytes:
    return envelope.HEADER.pack(envelope.MAGIC, envelope.VERSION, 7, seq, 5) + b"p" * 40


def test_batches_are_recorded_and_each_acked_by_the_next_statement() -> None:
    server, seen = _scripted(
        [
            _reply([_row(11, _payload(0), 1), _row(12, b"short", 1)]),
            _reply([_row(13, _payload(1), 2), _row(14, _payload(2), 1)]),
            _reply([_row(15, _payload(3), 1)]),
        ],
        wake_before=2,
    )
    (got,) = _serve(server)
    headers, recv_ns, lens, flagged, received, short, acked, status, message, again = got
    assert (status, message, again) == (0, None, 0)
    assert [s[:2] for s in seen] == [([], 10), ([11, 12], 10), ([13, 14], 10), ([15], 0)]
    assert all(s[2] == 30.0 for s in seen)
    assert (received, short, acked) == (5, 1, 5)
    assert _header_seqs(headers) == [0, 1, 2, 3]
    assert list(array.array("q", lens)) == [1, 2, 1]
    assert list(array.array("q", flagged)) == [1]  # the row delivered twice (seq 1)
    assert all(ns > 1000 for ns in array.array("q", recv_ns))


def test_an_error_ends_the_lane_with_its_last_batch_unacked() -> None:
    def server(sock: socket.socket, wake: Callable[[], object]) -> None:
        _read_statement(sock)
        sock.sendall(_reply([_row(21, _payload(0), 1)]))
        _read_statement(sock)
        err = _message(b"E", b"SERROR\x00C57P01\x00Mterminating connection\x00\x00")
        sock.sendall(_message(b"2", b"") + err + _message(b"Z", b"I"))

    (got,) = _serve(server)
    _, _, _, _, received, _, acked, status, message, again = got
    assert (received, acked, status, message, again) == (1, 0, 1, "terminating connection", 0)


def _deadlock(rows: list[bytes]) -> bytes:
    """A reply that a deadlock ended after ``rows`` were sent: the statement rolled back."""
    err = _message(b"E", b"SERROR\x00C40P01\x00Mdeadlock detected\x00\x00")
    return _message(b"2", b"") + b"".join(rows) + err + _message(b"Z", b"E")


def test_a_statement_a_deadlock_rolled_back_goes_again_and_its_rows_are_forgotten() -> None:
    server, seen = _scripted(
        [
            _reply([_row(41, _payload(0), 1), _row(42, b"short", 1)]),
            # rolled back after two of its rows (one short, one flagged) were sent
            _deadlock([_row(43, b"x", 1), _row(44, _payload(9), 2)]),
            _deadlock([]),  # the same statement again, rolled back again
            _reply([_row(45, _payload(1), 1)]),  # and again
        ],
        wake_before=3,
    )
    (got,) = _serve(server)
    headers, recv_ns, lens, flagged, received, short, acked, status, message, again = got
    assert (status, message, again) == (0, None, 2)
    assert [s[:2] for s in seen] == [
        ([], 10),
        ([41, 42], 10),
        ([41, 42], 10),
        ([41, 42], 10),
        ([45], 0),
    ]
    assert (received, short, acked) == (3, 1, 3)
    assert _header_seqs(headers) == [0, 1]
    assert list(array.array("q", lens)) == [1, 1]
    assert list(array.array("q", flagged)) == []


def test_a_closed_connection_fails_the_lane() -> None:
    def server(sock: socket.socket, wake: Callable[[], object]) -> None:
        _read_statement(sock)
        sock.sendall(_reply([_row(31, _payload(0), 1)])[:20])  # cut inside a row
        sock.shutdown(socket.SHUT_RDWR)

    (got,) = _serve(server)
    _, _, _, _, received, _, acked, status, _, _ = got
    assert (received, acked, status) == (0, 0, 3)


def test_an_empty_claim_is_polled_again_and_nothing_is_acked_at_the_end() -> None:
    seen: list[tuple[list[int], int, float]] = []

    def server(sock: socket.socket, wake: Callable[[], object]) -> None:
        seen.append(_read_statement(sock))
        sock.sendall(_reply([]))
        seen.append(_read_statement(sock))  # polled again after the backoff
        wake()
        sock.sendall(_reply([]))

    (got,) = _serve(server)
    assert [s[:2] for s in seen] == [([], 10), ([], 10)]
    assert got[4:] == (0, 0, 0, 0, None, 0)
