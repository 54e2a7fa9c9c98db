"""One STOMP 1.2 connection of the Artemis driver: a socket, the CONNECT handshake, a
reader thread and heart-beats (``mqlab.brokers.artemis.frames`` makes and splits the
frames).

The reader thread reads up to ``RECV_BYTES`` at a time, splits the read into frames in
one pass and hands the read's MESSAGE frames to the listener together (``on_messages``),
so a receiver takes the lock of its buffer once per read, not once per message. Writes
from any thread go through one lock; ``ack_many`` writes a batch's ACK frames in one
``sendall``. Heart-beats: the reader thread wakes at least every ``TICK_S``, writes an EOL
when nothing was written for the negotiated interval, and gives the connection up when
the broker was silent for twice its interval (``on_heartbeat_timeout``)."""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from mqlab.brokers.artemis.frames import Frame, FrameError, Parser, ack_frames, encode

LOG = logging.getLogger(__name__)

RECV_BYTES = 256 * 1024
TICK_S = 1.0


class Closed(OSError):
    """The connection is closed (or the broker refused it)."""


class Listener(Protocol):
    def on_messages(self, frames: list[Frame]) -> None: ...
    def on_receipt(self, frame: Frame) -> None: ...
    def on_error(self, frame: Frame) -> None: ...
    def on_disconnected(self) -> None: ...
    def on_heartbeat_timeout(self) -> None: ...


def negotiate(ours: int, theirs: str) -> tuple[float, float]:
    """Seconds between our heart-beats and between the broker's, from our ``ours`` ms
    (both ways) and its CONNECTED ``heart-beat`` header (0: none)."""
    try:
        sx, sy = (int(v) for v in theirs.split(","))
    except ValueError:
        return 0.0, 0.0
    send = max(ours, sy) / 1000 if ours and sy else 0.0
    expect = max(ours, sx) / 1000 if ours and sx else 0.0
    return send, expect


class Connection:
    """A STOMP 1.2 connection to the first of ``hosts`` that answers CONNECTED (``open``)."""

    def __init__(
        self,
        hosts: Sequence[tuple[str, int]],
        listener: Listener,
        heartbeat_ms: int = 0,
        timeout_s: float = 5.0,
        content_length: bool = True,
        lean: bool = False,
    ) -> None:
        self.hosts = list(hosts)
        self.listener = listener
        self.heartbeat_ms = heartbeat_ms
        self.timeout_s = timeout_s
        self.content_length = content_length
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()
        self.lean = lean  # MESSAGE frames with only the receiver's headers (frames.Parser)
        self.parser = Parser(lean)
        self.server = ""
        self.send_every = self.expect_every = 0.0
        self.last_read = self.last_write = time.monotonic()
        self.closing = False
        self.disconnect_receipt = ""
        self.thread: threading.Thread | None = None

    # -- opening --------------------------------------------------------------------------
    def open(self) -> None:
        """CONNECT to each host in turn; the first CONNECTED wins. Closed (an OSError)
        when none answers."""
        errors = []
        for host, port in self.hosts:
            try:
                self._open(host, port)
                return
            except (OSError, FrameError) as e:
                errors.append(f"{host}:{port}: {e}")
                self.close_socket()
        raise Closed("; ".join(errors) or "no hosts")

    def _open(self, host: str, port: int) -> None:
        self.closing = False  # a host tried before may have failed
        sock = socket.create_connection((host, port), timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.parser = sock, Parser(self.lean)
        hb = f"{self.heartbeat_ms},{self.heartbeat_ms}"
        sock.sendall(encode("CONNECT", {"accept-version": "1.2", "host": host, "heart-beat": hb}))
        deadline = time.monotonic() + self.timeout_s
        frames: list[Frame] = []
        while not frames:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = sock.recv(RECV_BYTES)
            if not data:
                raise Closed("closed before CONNECTED")
            frames = self.parser.feed(data)
        first, rest = frames[0], frames[1:]
        if first.command != "CONNECTED":
            text = first.headers.get("message") or first.body[:200].decode(errors="replace")
            raise Closed(f"{first.command}: {text}")
        self.server = first.headers.get("server", "")
        self.send_every, self.expect_every = negotiate(
            self.heartbeat_ms, first.headers.get("heart-beat", "0,0")
        )
        sock.settimeout(None)
        self.last_read = self.last_write = time.monotonic()
        if rest:
            self._dispatch(rest)
        self.thread = threading.Thread(target=self._read_loop, name="artemis-stomp", daemon=True)
        self.thread.start()

    # -- writing (any thread) -------------------------------------------------------------
    def write(self, data: bytes) -> None:
        sock = self.sock
        if sock is None or self.closing:
            raise Closed("the connection is closed")
        with self.lock:
            sock.sendall(data)
            self.last_write = time.monotonic()

    def send(self, destination: str, body: bytes, headers: Mapping[str, str]) -> None:
        self.write(
            encode("SEND", {"destination": destination, **headers}, body, self.content_length)
        )

    def subscribe(self, destination: str, id: str, ack: str, headers: Mapping[str, str]) -> None:
        headers = {"destination": destination, "id": id, "ack": ack, **headers}
        self.write(encode("SUBSCRIBE", headers))

    def unsubscribe(self, id: str, headers: Mapping[str, str]) -> None:
        self.write(encode("UNSUBSCRIBE", {"id": id, **headers}))

    def ack_many(self, ids: list[str], receipt: str | None) -> None:
        """One ACK frame per id, written together; the last one carries ``receipt``."""
        if ids:
            self.write(ack_frames(ids, receipt))

    def disconnect(self, receipt: str) -> None:
        """DISCONNECT with ``receipt``: the reader closes the socket when it comes."""
        self.disconnect_receipt = receipt
        self.write(encode("DISCONNECT", {"receipt": receipt}))

    def close_socket(self) -> None:
        self.closing = True
        sock, self.sock = self.sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    # -- the reader thread ----------------------------------------------------------------
    def _dispatch(self, frames: list[Frame]) -> None:
        messages: list[Frame] = []
        for f in frames:
            if f.command == "MESSAGE":
                messages.append(f)
                continue
            if messages:
                self.listener.on_messages(messages)
                messages = []
            if f.command == "RECEIPT":
                self.listener.on_receipt(f)
                rid = f.headers.get("receipt-id")
                if self.disconnect_receipt and rid == self.disconnect_receipt:
                    self.close_socket()
            elif f.command == "ERROR":
                self.listener.on_error(f)
            else:
                LOG.debug("artemis: unexpected %s frame ignored", f.command)
        if messages:
            self.listener.on_messages(messages)

    def _read_loop(self) -> None:
        sock = self.sock
        if sock is None:
            return
        poll = select.poll()
        poll.register(sock, select.POLLIN)
        tick = min([TICK_S] + [t / 2 for t in (self.send_every, self.expect_every) if t])
        try:
            while not self.closing:
                ready = poll.poll(tick * 1000)
                now = time.monotonic()
                if ready:
                    data = sock.recv(RECV_BYTES)
                    if not data:
                        break
                    self.last_read = now
                    frames = self.parser.feed(data)
                    if frames:
                        self._dispatch(frames)
                if self.send_every and now - self.last_write >= self.send_every:
                    self.write(b"\n")
                if self.expect_every and now - self.last_read > 2 * self.expect_every:
                    self.listener.on_heartbeat_timeout()
                    break
        except (OSError, FrameError) as e:
            if not self.closing:
                LOG.debug("artemis: connection read: %s: %s", type(e).__name__, e)
        except Exception:  # a listener's bug: the connection is given up, loudly
            LOG.exception("artemis: reader thread")
        finally:
            self.close_socket()
            self.listener.on_disconnected()
