"""STOMP 1.2 frames as bytes: what the Artemis driver writes (``encode``, ``ack_frames``)
and a parser (``Parser``) that splits what it reads into frames in bulk.

The parser works on the whole buffer of a read: it finds each frame's header end with
``bytes.find``, takes its body by its ``content-length`` header (a body may hold NUL bytes)
or else up to the next NUL, and keeps an unfinished frame for the next read. A lean
parser (a receiver's) does not split a MESSAGE frame's headers into a dict: it looks up
only the three the receiver needs (``ack``, ``message-id``, ``redelivered``); every other
frame gets all its headers.
Header values are escaped as STOMP 1.2 says (backslash, CR, LF, colon), except in the
CONNECT and CONNECTED frames."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

NUL = b"\x00"
ESCAPES = (("\\", "\\\\"), ("\r", "\\r"), ("\n", "\\n"), (":", "\\c"))
UNESCAPES = {"\\\\": "\\", "\\r": "\r", "\\n": "\n", "\\c": ":"}


class FrameError(ValueError):
    """Bytes that are no STOMP frame (the connection cannot go on)."""


@dataclass(slots=True)
class Frame:
    """One frame read. A lean parser's MESSAGE frame carries only ``ack``,
    ``message-id`` and ``redelivered`` (those present) in ``headers``."""

    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def escape(value: str) -> str:
    if "\\" in value or "\r" in value or "\n" in value or ":" in value:
        for raw, escaped in ESCAPES:
            value = value.replace(raw, escaped)
    return value


def unescape(value: str) -> str:
    if "\\" not in value:
        return value
    out, i = [], 0
    while i < len(value):
        pair = value[i : i + 2]
        if pair in UNESCAPES:
            out.append(UNESCAPES[pair])
            i += 2
        else:  # an undefined escape: STOMP 1.2 calls it an error; keep it as it came
            out.append(value[i])
            i += 1
    return "".join(out)


def encode(
    command: str, headers: Mapping[str, str], body: bytes = b"", content_length: bool = True
) -> bytes:
    """A frame's bytes. ``content_length``: with a ``content-length`` header (without it,
    Artemis maps a SEND to a text message, and the body must hold no NUL)."""
    plain = command in ("CONNECT", "STOMP")
    lines = [command]
    for k, v in headers.items():
        lines.append(f"{k}:{v}" if plain else f"{escape(k)}:{escape(str(v))}")
    if content_length and body:
        lines.append(f"content-length:{len(body)}")
    return ("\n".join(lines) + "\n\n").encode() + body + NUL


def ack_frames(ids: list[str], receipt: str | None) -> bytes:
    """ACK frames of STOMP 1.2 for ``ids`` in one buffer, the last with ``receipt``."""
    parts = [f"ACK\nid:{escape(i)}\n\n\x00" for i in ids[:-1]]
    last = f"ACK\nid:{escape(ids[-1])}\n" + (f"receipt:{receipt}\n" if receipt else "")
    parts.append(last + "\n\x00")
    return "".join(parts).encode()


def _value(head: bytes, name: bytes) -> str | None:
    """The first ``name`` header's value in a frame's header bytes (``head`` starts with
    the LF that ends the command line), or None."""
    i = head.find(b"\n" + name + b":")
    if i < 0:
        return None
    start = i + len(name) + 2
    end = head.find(b"\n", start)
    raw = head[start:end] if end >= 0 else head[start:]
    return unescape(raw.rstrip(b"\r").decode())


def _headers(head: bytes, command: str) -> dict[str, str]:
    out: dict[str, str] = {}
    plain = command == "CONNECTED"
    for line in head.split(b"\n"):
        line = line.rstrip(b"\r")
        if not line:
            continue
        k, sep, v = line.decode().partition(":")
        if not sep:
            raise FrameError(f"a header line without a colon: {line[:80]!r}")
        if not plain:
            k, v = unescape(k), unescape(v)
        out.setdefault(k, v)  # a repeated header: the first value counts
    return out


MESSAGE_HEADERS = (b"ack", b"message-id", b"redelivered")


class Parser:
    """Feed it the bytes of each read; it returns the frames they complete, in order.
    Heart-beats (lone EOLs between frames) are skipped."""

    def __init__(self, lean: bool = False) -> None:
        self.buf = b""
        self.lean = lean  # MESSAGE frames: only ``MESSAGE_HEADERS``

    def feed(self, data: bytes) -> list[Frame]:
        buf = self.buf + data if self.buf else data
        out: list[Frame] = []
        pos, n = 0, len(buf)
        while pos < n:
            # heart-beats and the EOLs STOMP allows after a frame's NUL
            while pos < n and buf[pos] in (10, 13):
                pos += 1
            if pos >= n:
                break
            end = buf.find(b"\n\n", pos)
            # a CRLF header end before it (searched only up to it: the rest of the buffer
            # is other frames)
            crlf = buf.find(b"\n\r\n", pos, end + 2 if end >= 0 else n)
            if crlf >= 0 and (end < 0 or crlf < end):
                end, skip = crlf, 3
            else:
                skip = 2
            if end < 0:
                break  # the headers are not all here yet
            line_end = buf.find(b"\n", pos, end + 1)
            command = buf[pos:line_end].rstrip(b"\r").decode()
            head = buf[line_end : end + 1]
            body_start = end + skip
            length_text = _value(head, b"content-length")
            if length_text is not None:
                try:
                    body_end = body_start + int(length_text)
                except ValueError:
                    raise FrameError(f"{command}: content-length {length_text!r}") from None
                if body_end >= n:
                    break  # the body (and its NUL) are not all here yet
                if buf[body_end] != 0:
                    raise FrameError(f"{command}: no NUL after content-length {length_text}")
            else:
                body_end = buf.find(NUL, body_start)
                if body_end < 0:
                    break
            if command == "MESSAGE" and self.lean:
                headers = {}
                for name in MESSAGE_HEADERS:
                    v = _value(head, name)
                    if v is not None:
                        headers[name.decode()] = v
            else:
                headers = _headers(head, command)
            out.append(Frame(command, headers, buf[body_start:body_end]))
            pos = body_end + 1
        self.buf = buf[pos:]
        return out
