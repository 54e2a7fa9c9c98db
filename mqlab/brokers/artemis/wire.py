"""The STOMP layer of the Artemis driver (module docstring of ``mqlab.brokers.artemis.driver``):
its settings, the frames' headers for either broker (Artemis or the ActiveMQ 5 stand-in),
the statistics and management replies, and one connection (``Link``) to whichever node
serves."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mqlab.brokers.artemis.conn import Connection
from mqlab.brokers.artemis.frames import Frame
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)

MANAGEMENT_ADDRESS = "activemq.management"  # Artemis's default management address
STATS_PREFIX = "ActiveMQ.Statistics.Destination."  # ActiveMQ 5's statistics plugin
# a request with this property gets an empty message after the last map (ActiveMQ 5)
STATS_END = "ActiveMQ.Statistics.Destination.List.End.With.Null"
NO_MATCH_SELECTOR = "mqlab_setup_never = 'set'"  # matches no message: setup's SUBSCRIBE
CONNECT_RETRY_S = 0.2
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Settings:
    prefetch: int = spec(
        1000,
        min=1,
        max=100_000,
        help="messages the broker sends each receiver ahead of receive(): ActiveMQ 5's "
        "activemq.prefetchSize; on Artemis, whose consumer-window-size counts bytes, "
        "prefetch * window_bytes_per_message",
    )
    window_bytes_per_message: int = spec(
        1048,
        min=64,
        help="Artemis only: bytes of consumer window per prefetched message (its size as "
        "the broker counts it: body, headers and properties)",
    )
    receipt_timeout_s: float = spec(
        30.0,
        min=0.1,
        help="a send (or an awaited ack, or a management request) whose "
        "receipt or reply has not come by then fails",
    )
    ack_receipts: bool = spec(
        True,
        help="the last ACK of each ack() call carries a receipt, awaited as "
        "ack_receipt_wait says (the broker handled them all); False: no receipts, "
        "ack() returns once the ACK frames are written",
    )
    ack_receipt_wait: str = spec(
        "next",
        choices=("next", "call"),
        help="when an ack's receipt is awaited: 'call' in the ack() that wrote it; "
        "'next' in the receiver's next ack(), after that one's ACKs are written (the "
        "broker journals the acks of one batch while the next is received, as a Core "
        "consumer's asynchronous acks; an ERROR for them fails the next ack())",
    )
    heartbeat_s: float = spec(
        10.0,
        min=0.0,
        help="STOMP heart-beats both ways (0: none); the broker returns a "
        "silent client's unacked messages after missing them",
    )
    connect_timeout_s: float = spec(
        15.0, min=0.1, help="how long a connection tries the nodes in turn (a failover)"
    )


# -- the two brokers -------------------------------------------------------------------
def is_artemis(server: str) -> bool:
    """Whether a CONNECTED frame's ``server`` header names Artemis (else ActiveMQ 5)."""
    return "artemis" in server.lower()


def destination(queue: str, artemis: bool) -> str:
    return queue if artemis else f"/queue/{queue}"


def send_headers(artemis: bool) -> dict[str, str]:
    headers = {"persistent": "true"}
    if artemis:
        headers["destination-type"] = "ANYCAST"
    return headers


def subscribe_headers(s: Settings, artemis: bool) -> dict[str, str]:
    """The SUBSCRIBE headers of a receiver: its routing type and read-ahead window."""
    if artemis:
        return {
            "subscription-type": "ANYCAST",
            "consumer-window-size": str(s.prefetch * s.window_bytes_per_message),
        }
    return {"activemq.prefetchSize": str(s.prefetch)}


def parse_stats_map(body: bytes) -> dict[str, Any]:
    """A statistics reply of ActiveMQ 5 in STOMP's ``jms-map-xml`` form, as a dict."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as e:
        raise DriverError(f"artemis: unreadable statistics reply {body[:80]!r}: {e}") from e
    if root.tag != "map":
        raise DriverError(f"artemis: a statistics reply is no map: {body[:80]!r}")
    out: dict[str, Any] = {}
    for entry in root.findall("entry"):
        parts = list(entry)
        if len(parts) != 2 or parts[0].text is None:
            continue
        kind, text = parts[1].tag, parts[1].text or ""
        if kind in ("long", "int", "short", "byte"):
            out[parts[0].text] = int(text)
        elif kind in ("double", "float"):
            out[parts[0].text] = float(text)
        else:
            out[parts[0].text] = text
    return out


def stats_end(body: bytes) -> bool:
    """Whether a statistics reply is the end marker: an empty map (``<map/>``). A body
    that is no map at all ends the replies too (and fails in ``parse_stats_map``)."""
    try:
        return not parse_stats_map(body)
    except DriverError:
        return True


def management_result(headers: dict[str, str], body: bytes) -> Any:
    """The result of an Artemis management reply (its body is a JSON array)."""
    text = body.decode(errors="replace").strip()
    if headers.get("_AMQ_OperationSucceeded", "").lower() != "true":
        raise DriverError(f"artemis: management request failed: {text[:300]}")
    try:
        value = json.loads(text) if text else None
    except ValueError as e:
        raise DriverError(f"artemis: unreadable management reply {text[:100]!r}") from e
    return value[0] if isinstance(value, list) and value else value


# -- one connection --------------------------------------------------------------------
class Link:
    """One STOMP 1.2 connection (``mqlab.brokers.artemis.conn``) to whichever node of the
    endpoints serves, and what came on it. The connection's reader thread calls the
    ``on_*`` methods; they notify ``cond`` (which a receiver shares, so that it also wakes
    when the connection goes)."""

    def __init__(
        self,
        conn: Any,
        cond: threading.Condition,
        on_message: Callable[[list[Frame]], None] | None,
    ) -> None:
        self.conn = conn
        self.cond = cond
        self.on_message_cb = on_message
        self.receipts: set[str] = set()  # receipt ids answered, not yet waited for
        self.waiting: list[set[str]] = []  # what each thread in wait() still misses
        self.failed: dict[str, str] = {}  # receipt id -> the ERROR frame's message
        self.errors: list[str] = []  # ERROR frames without a receipt id
        self.lost = False
        self.server = ""
        self.numbers = itertools.count()

    # the connection's reader thread
    def on_connected(self, frame: Frame) -> None:
        self.server = str(frame.headers.get("server", ""))

    def on_messages(self, frames: list[Frame]) -> None:
        if self.on_message_cb is not None:
            self.on_message_cb(frames)

    def on_receipt(self, frame: Frame) -> None:
        """Noted; a waiter is woken only by the last receipt it misses (a send of n
        messages waits for n receipts: one wake-up, not n), and a receiver waiting for
        messages on the shared ``cond`` not at all."""
        rid = str(frame.headers.get("receipt-id"))
        with self.cond:
            self.receipts.add(rid)
            wake = False
            for want in self.waiting:
                if rid in want:
                    want.discard(rid)
                    wake = wake or not want
            if wake:
                self.cond.notify_all()

    def on_error(self, frame: Frame) -> None:
        text = str(frame.headers.get("message", "")) or bytes(frame.body or b"")[:200].decode(
            errors="replace"
        )
        with self.cond:
            rid = frame.headers.get("receipt-id")
            if rid is not None:
                self.failed[str(rid)] = text
            else:
                self.errors.append(text)
            self.cond.notify_all()

    def on_disconnected(self) -> None:
        with self.cond:
            self.lost = True
            self.cond.notify_all()

    def on_heartbeat_timeout(self) -> None:
        LOG.warning("artemis: no heart-beat from the broker: the connection is given up")
        self.on_disconnected()

    # the caller's thread
    @property
    def artemis(self) -> bool:
        return is_artemis(self.server)

    def receipt_id(self) -> str:
        return f"r{next(self.numbers)}"

    def frame(self, write: Callable[[], None], what: str) -> None:
        """Write a frame (``write`` calls the connection); a closed connection is a
        DriverError."""
        if self.lost:
            raise DriverError(f"artemis: {what}: the connection is lost")
        try:
            write()
        except OSError as e:
            with self.cond:
                self.lost = True
            raise DriverError(f"artemis: {what}: {type(e).__name__}: {e}") from e

    def wait(self, ids: Sequence[str], timeout_s: float, what: str) -> None:
        """Until every receipt of ``ids`` came; DriverError on an ERROR frame, a lost
        connection or the timeout."""
        deadline = time.monotonic() + timeout_s
        want = set(ids)
        with self.cond:
            self.waiting.append(want)
            try:
                self._wait(want, ids, deadline, timeout_s, what)
            finally:
                self.waiting = [w for w in self.waiting if w is not want]

    def _wait(
        self, want: set[str], ids: Sequence[str], deadline: float, timeout_s: float, what: str
    ) -> None:
        """``wait`` with ``cond`` held; ``want`` (in ``waiting``) shrinks in place."""
        while True:
            failed = [self.failed.pop(i) for i in list(want) if i in self.failed]
            if failed or self.errors:
                errors, self.errors = self.errors, []
                raise DriverError(
                    f"artemis: {what}: the broker answered ERROR: {(failed + errors)[:3]}"
                )
            want -= self.receipts
            self.receipts -= set(ids)
            if not want:
                return
            if self.lost:
                raise DriverError(
                    f"artemis: {what}: connection lost with {len(want)} of "
                    f"{len(ids)} receipts missing"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise DriverError(
                    f"artemis: {what}: {len(want)} of {len(ids)} receipts missing after "
                    f"{timeout_s} s"
                )
            self.cond.wait(left)

    def close(self) -> None:
        """DISCONNECT (the broker then returns what this connection held unacked) and wait
        a while for its receipt, on which the connection closes its socket; close it
        ourselves after that."""
        if not self.lost:
            try:
                self.conn.disconnect(f"bye-{self.receipt_id()}")
            except OSError as e:
                LOG.debug("artemis: DISCONNECT: %s", e)
            deadline = time.monotonic() + CLOSE_TIMEOUT_S
            with self.cond:
                while not self.lost and time.monotonic() < deadline:
                    self.cond.wait(max(0.0, deadline - time.monotonic()))
        if not self.lost:
            LOG.debug("artemis: no answer to DISCONNECT: closing the socket")
        self.conn.close_socket()


def connect(
    hosts: list[tuple[str, int]],
    s: Settings,
    cond: threading.Condition | None = None,
    on_message: Callable[[list[Frame]], None] | None = None,
    timeout_s: float | None = None,
    text_bodies: bool = False,
    lean: bool = False,
) -> Link:
    """A Link to the first node of ``hosts`` that accepts a STOMP connection, tried in turn
    until ``timeout_s`` (``connect_timeout_s``). ``text_bodies``: frames go without a
    ``content-length`` (Artemis maps such a frame to a text message). ``lean``: MESSAGE
    frames carry only the headers a receiver needs (``frames.Parser``)."""
    deadline = time.monotonic() + (s.connect_timeout_s if timeout_s is None else timeout_s)
    heartbeat_ms = int(s.heartbeat_s * 1000)
    last: Exception | None = None
    while True:
        link = Link(None, cond or threading.Condition(), on_message)
        conn = Connection(
            hosts,
            link,
            heartbeat_ms=heartbeat_ms,
            timeout_s=min(5.0, max(0.5, deadline - time.monotonic())),
            content_length=not text_bodies,
            lean=lean,
        )
        link.conn = conn
        try:
            conn.open()
            link.on_connected(Frame("CONNECTED", {"server": conn.server}))
            return link
        except OSError as e:
            last = e
        if time.monotonic() + CONNECT_RETRY_S > deadline:
            where = ", ".join(f"{h}:{p}" for h, p in hosts)
            raise DriverError(f"artemis: no node accepts a STOMP connection ({where}): {last!r}")
        time.sleep(CONNECT_RETRY_S)


def management_frame(
    resource: str,
    reply_to: str,
    *,
    attribute: str | None = None,
    operation: str | None = None,
    params: list[Any] | None = None,
) -> tuple[str, bytes, dict[str, str]]:
    """A SEND to Artemis's management address: read ``attribute`` of ``resource`` or invoke
    ``operation`` with ``params`` (a JSON array in the body); the reply goes to
    ``reply_to``."""
    headers = {"_AMQ_ResourceName": resource, "reply-to": reply_to}
    if attribute is not None:
        headers["_AMQ_Attribute"] = attribute
    if operation is not None:
        headers["_AMQ_OperationName"] = operation
    body = json.dumps(params or []).encode() if operation is not None else b""
    return MANAGEMENT_ADDRESS, body, headers
