"""What the Pulsar driver's ``remaining()`` reads: the admin API's topic stats."""

from __future__ import annotations

from typing import Any


def parse_topic_stats(stats: dict[str, Any], subscription: str) -> tuple[int, int] | None:
    """(backlog, unacked) of ``subscription`` from the admin API's topic stats."""
    sub = stats.get("subscriptions", {}).get(subscription)
    if sub is None:
        return None
    return int(sub.get("msgBacklog", 0)), int(sub.get("unackedMessages", 0))
