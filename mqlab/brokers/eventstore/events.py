"""The EventStoreDB driver's mapping of a queue onto one stream: its name, the connection
string, the events a batch becomes and the delivery an event becomes, and the backlog a
persistent subscription's checkpoint leaves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kurrentdbclient import NewEvent

from mqlab.brokers.base import (
    Delivery,
)
from mqlab.errors import DriverError

EVENT_TYPE = "mqlab"  # every message is one event of this type


def stream_name(queue: str) -> str:
    """The stream of ``queue``; names starting with ``$`` are the server's own, so those
    (and an empty name) get a prefix."""
    return queue if queue and not queue.startswith("$") else f"q_{queue}"


def connection_uri(endpoints: Any, queue: str) -> str:
    """kurrentdbclient's connection string: every node as a gossip seed, the leader
    preferred (the default), no TLS (the lab's servers run Insecure)."""
    if not endpoints.nodes:
        raise DriverError("eventstore: the endpoints name no node")
    hosts = ",".join(f"{n.host}:{n.port}" for n in endpoints.nodes)
    return f"kurrentdb://{hosts}?Tls=false&ConnectionName=mqlab-{queue}"


def new_events(batch: Sequence[bytes]) -> list[NewEvent]:
    """One event per message, each with its own id (NewEvent draws a uuid4)."""
    return [
        NewEvent(type=EVENT_TYPE, data=bytes(m), content_type="application/octet-stream")
        for m in batch
    ]


def to_delivery(event: Any) -> Delivery:
    """A delivery of the group; the ack id names it, the server's retry count says whether
    it was delivered before."""
    return Delivery(bytes(event.data), event.ack_id, bool(event.retry_count))


def checkpoint_number(text: str) -> int:
    """The group's last checkpointed event number as GetInfo reports it for a stream
    subscription: its number as text, or ``""`` (or ``-1``) before the first checkpoint,
    which is returned as -1 (no event processed)."""
    text = text.strip()
    if not text:
        return -1
    try:
        number = int(text)
    except ValueError:
        raise DriverError(f"eventstore: unexpected checkpoint position {text!r}") from None
    if number < -1:
        raise DriverError(f"eventstore: unexpected checkpoint position {text!r}")
    return number


def backlog(last_event: int | None, checkpoint: int) -> int:
    """Events after the checkpoint: ``last_event`` is the stream's last event number
    (``None``: no stream yet, nothing appended)."""
    if last_event is None:
        return 0
    return max(0, last_event - checkpoint)
