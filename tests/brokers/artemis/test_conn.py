"""mqlab's STOMP 1.2 client for Artemis without a broker: the frame parser fed in pieces
(a frame split across reads, several frames in one read, bodies holding NULs, heart-beats,
CRLF frames, escaped headers), the frames written, and one connection to a scripted
loopback broker (CONNECT, a read's MESSAGE frames handed over together, ACKs of a batch in
one write, an ERROR frame, heart-beats, the socket closing). The same client runs against
real Artemis in tests/brokers/test_contract.py and tests/brokers/artemis/."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import pytest

from mqlab.brokers.artemis import conn as sc
from mqlab.brokers.artemis import frames as fr


def _message(ack: str, body: bytes, redelivered: bool = False, length: bool = True) -> bytes:
    headers = {
        "subscription": "s1",
        "message-id": f"m{ack}",
        "destination": "q",
        "ack": ack,
        "persistent": "true",
    }
    if redelivered:
        headers["redelivered"] = "true"
    return fr.encode("MESSAGE", headers, body, content_length=length)


def test_frames_split_at_every_byte_come_out_whole_and_in_order() -> None:
    data = _message("1", b"one") + b"\n" + _message("2", b"two\x00with\x00nuls") + b"\n\n"
    data += fr.encode("RECEIPT", {"receipt-id": "r7"})
    for cut in range(len(data)):
        p = fr.Parser(lean=True)
        got = p.feed(data[:cut]) + p.feed(data[cut:])
        assert [f.command for f in got] == ["MESSAGE", "MESSAGE", "RECEIPT"], cut
        assert [f.body for f in got[:2]] == [b"one", b"two\x00with\x00nuls"]
        assert got[0].headers == {"ack": "1", "message-id": "m1"}
        assert got[2].headers == {"receipt-id": "r7"}
        assert p.buf == b""


def test_one_read_of_many_frames_and_bodies_without_content_length() -> None:
    data = b"".join(_message(str(i), b"x" * i, length=False) for i in range(1, 50))
    got = fr.Parser(lean=True).feed(data)
    assert [f.body for f in got] == [b"x" * i for i in range(1, 50)]
    assert [f.headers["ack"] for f in got] == [str(i) for i in range(1, 50)]


def test_a_lean_parser_keeps_three_message_headers_and_a_full_one_all() -> None:
    data = _message("a,1", b"p", redelivered=True)
    [lean] = fr.Parser(lean=True).feed(data)
    assert lean.headers == {"ack": "a,1", "message-id": "ma,1", "redelivered": "true"}
    [full] = fr.Parser().feed(data)
    assert full.headers["destination"] == "q" and full.headers["content-length"] == "1"
    assert full.headers["subscription"] == "s1"


def test_headers_are_escaped_both_ways_and_the_first_repeat_counts() -> None:
    raw = fr.encode("SEND", {"k": "a:b\nc\\d"}, b"")
    assert b"k:a\\cb\\nc\\\\d\n" in raw
    [f] = fr.Parser().feed(b"ERROR\r\nmessage:a\\cb\r\nmessage:second\r\n\r\nbody\x00")
    assert f.command == "ERROR" and f.headers == {"message": "a:b"} and f.body == b"body"
    [c] = fr.Parser().feed(b"CONNECTED\nversion:1.2\nserver:x\\cy\n\n\x00")
    assert c.headers["server"] == "x\\cy"  # CONNECTED headers are not escaped


def test_bad_frames_are_errors() -> None:
    with pytest.raises(fr.FrameError, match="no NUL"):
        fr.Parser().feed(b"MESSAGE\ncontent-length:2\n\nabc\x00")
    with pytest.raises(fr.FrameError, match="content-length"):
        fr.Parser().feed(b"MESSAGE\ncontent-length:x\n\nabc\x00")
    with pytest.raises(fr.FrameError, match="colon"):
        fr.Parser().feed(b"RECEIPT\nnocolon\n\n\x00")


def test_a_batch_of_acks_is_one_buffer_its_last_with_the_receipt() -> None:
    raw = fr.ack_frames(["1", "2", "3"], "r9")
    got = fr.Parser().feed(raw)
    assert [(f.command, f.headers) for f in got] == [
        ("ACK", {"id": "1"}),
        ("ACK", {"id": "2"}),
        ("ACK", {"id": "3", "receipt": "r9"}),
    ]
    assert fr.Parser().feed(fr.ack_frames(["1"], None))[0].headers == {"id": "1"}


def test_heart_beats_are_negotiated_as_stomp_says() -> None:
    assert sc.negotiate(10_000, "5000,20000") == (20.0, 10.0)
    assert sc.negotiate(10_000, "0,0") == (0.0, 0.0)
    assert sc.negotiate(0, "5000,5000") == (0.0, 0.0)
    assert sc.negotiate(1000, "junk") == (0.0, 0.0)


# -- one connection to a scripted broker on loopback -------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.batches: list[list[fr.Frame]] = []
        self.receipts: list[str] = []
        self.errors: list[str] = []
        self.lost = self.timeout = False

    def _note(self, fn: Any) -> None:
        with self.cond:
            fn()
            self.cond.notify_all()

    def on_messages(self, frames: list[fr.Frame]) -> None:
        self._note(lambda: self.batches.append(frames))

    def on_receipt(self, frame: fr.Frame) -> None:
        self._note(lambda: self.receipts.append(frame.headers["receipt-id"]))

    def on_error(self, frame: fr.Frame) -> None:
        self._note(lambda: self.errors.append(frame.headers.get("message", "")))

    def on_disconnected(self) -> None:
        self._note(lambda: setattr(self, "lost", True))

    def on_heartbeat_timeout(self) -> None:
        self._note(lambda: setattr(self, "timeout", True))

    def until(self, check: Any) -> None:
        with self.cond:
            assert self.cond.wait_for(check, 10), "nothing came"


class Broker:
    """A loopback listener that answers CONNECT with ``connected`` and records what the
    client writes; the test writes the broker's frames with ``push``."""

    def __init__(self, connected: bytes) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connected = connected
        self.got = b""
        self.peer: socket.socket | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):  # the test closed it
            self._converse()

    def _converse(self) -> None:
        peer, _ = self.listener.accept()
        self.peer = peer
        while b"\x00" not in self.got:
            self.got += peer.recv(4096)
        peer.sendall(self.connected)
        self.ready.set()
        while chunk := peer.recv(4096):
            self.got += chunk

    def received(self, needle: bytes) -> None:
        """Until the client's bytes read so far hold ``needle`` (at most 10 s): the broker's
        thread reads them at its own pace, whatever the client got from it meanwhile."""
        deadline = time.monotonic() + 10
        while needle not in self.got:
            assert time.monotonic() < deadline, f"the broker never read {needle!r}"
            time.sleep(0.005)

    def push(self, data: bytes) -> None:
        assert self.ready.wait(10) and self.peer is not None
        self.peer.sendall(data)

    def close(self) -> None:
        if self.peer is not None:
            with contextlib.suppress(OSError):
                self.peer.shutdown(socket.SHUT_RDWR)  # a FIN, though _serve is in recv()
            self.peer.close()
        self.listener.close()


CONNECTED = b"CONNECTED\nversion:1.2\nserver:ActiveMQ-Artemis/2.40.0\nheart-beat:0,0\n\n\x00"


def test_a_connection_hands_over_a_reads_messages_together_and_writes_acks_at_once() -> None:
    broker = Broker(CONNECTED)
    rec = Recorder()
    c = sc.Connection([("127.0.0.1", 1), ("127.0.0.1", broker.port)], rec, 10_000, lean=True)
    try:
        c.open()  # the first host refuses: the second answers
        assert c.server == "ActiveMQ-Artemis/2.40.0"
        assert b"accept-version:1.2" in broker.got and b"heart-beat:10000,10000" in broker.got
        broker.push(b"".join(_message(str(i), b"p\x00%d" % i) for i in range(20)))
        rec.until(lambda: sum(len(b) for b in rec.batches) == 20)
        assert len(rec.batches) < 20  # one call per read, not per frame
        bodies = [f.body for b in rec.batches for f in b]
        assert bodies == [b"p\x00%d" % i for i in range(20)]
        c.ack_many(["1", "2"], "r1")
        broker.push(fr.encode("RECEIPT", {"receipt-id": "r1"}))
        rec.until(lambda: rec.receipts == ["r1"])
        broker.received(
            b"receipt:r1\n\n\x00"
        )  # the RECEIPT came; the broker's read of the ACKs may lag
        acks = [f for f in fr.Parser().feed(broker.got.split(b"\x00", 1)[1]) if f.command == "ACK"]
        assert [f.headers for f in acks] == [{"id": "1"}, {"id": "2", "receipt": "r1"}]
        broker.push(fr.encode("ERROR", {"message": "no such id"}, b"details"))
        rec.until(lambda: rec.errors == ["no such id"])
        c.disconnect("bye")  # the reader closes the socket on DISCONNECT's receipt
        broker.push(fr.encode("RECEIPT", {"receipt-id": "bye"}))
        rec.until(lambda: rec.lost)
        with pytest.raises(OSError):
            c.send("q", b"late", {})
    finally:
        c.close_socket()
        broker.close()


def test_a_broker_closing_the_socket_or_falling_silent_loses_the_connection() -> None:
    broker = Broker(CONNECTED)
    rec = Recorder()
    c = sc.Connection([("127.0.0.1", broker.port)], rec)
    c.open()
    broker.close()
    rec.until(lambda: rec.lost)
    c.close_socket()

    silent = Broker(CONNECTED.replace(b"heart-beat:0,0", b"heart-beat:100,100"))
    rec = Recorder()
    c = sc.Connection([("127.0.0.1", silent.port)], rec, heartbeat_ms=100)
    start = time.monotonic()
    c.open()
    rec.until(lambda: rec.lost)
    assert rec.timeout and time.monotonic() - start >= 0.2
    assert b"\n" in silent.got.split(b"\x00", 1)[1]  # it sent heart-beats meanwhile
    silent.close()


def test_a_refused_connect_names_every_host() -> None:
    broker = Broker(b"ERROR\nmessage:go away\n\n\x00")
    c = sc.Connection([("127.0.0.1", broker.port)], Recorder())
    with pytest.raises(sc.Closed, match="ERROR: go away"):
        c.open()
    broker.close()
