"""The brokers the driver contract suite runs against, each on its real local server.

To add a broker: one ``Target`` entry. ``settings`` must make redelivery quick
(a visibility timeout of about ``visibility_s``) so the suite stays short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    broker: str
    settings: Callable[[], Any]  # the driver's Settings with short timeouts
    visibility_s: float  # after this, unacked deliveries must be visible again
    nodes: int | None = None  # None: the launcher's default (3)
    reports_redelivery: bool = True  # Delivery.redelivered is set by this broker


def _nats() -> Any:
    from mqlab.drivers.nats import Settings

    return Settings(ack_wait_s=2.0)


def _postgres() -> Any:
    from mqlab.drivers.postgres import Settings

    return Settings(visibility_timeout_s=2.0, poll_interval_s=0.05, commit_timeout_s=10.0)


TARGETS: dict[str, Target] = {
    "nats": Target("nats", _nats, visibility_s=2.0),
    "postgres": Target("postgres", _postgres, visibility_s=2.0),
}
