"""What the Pulsar driver's ``remaining()`` reads: the stand-in's metrics (pulsar-lite's
Prometheus series) and Pulsar's topic stats."""

from __future__ import annotations

from typing import Any

from mqlab.brokers.base import Remaining

LITE_SERIES = {
    "pulsar_in_messages_total": "in",  # per topic: messages stored (a live counter)
    "pulsar_lite_subscription_acked_messages_total": "acked",  # distinct acks (live)
    "pulsar_subscription_back_log": "backlog",  # recomputed every stats period
    "pulsar_subscription_unacked_messages": "unacked",  # ditto
    "process_start_time_seconds": "started",
}


def parse_metrics(text: str, topic: str, subscription: str) -> dict[str, float]:
    """The series of ``LITE_SERIES`` for ``topic`` (its short name) and ``subscription``
    from a Prometheus text page, by their short keys; series not on the page are left out.
    A per-topic series matches any subscription label; a series without labels, any."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels_text = head.partition("{")
        key = LITE_SERIES.get(name)
        if key is None:
            continue
        labels = {}
        for part in labels_text.rstrip("}").split(","):
            k, sep, v = part.partition("=")
            if sep:
                labels[k.strip()] = v.strip().strip('"')
        if labels.get("topic", topic) != topic:
            continue
        if labels.get("subscription", subscription) != subscription:
            continue
        try:
            found[key] = float(value)
        except ValueError:
            continue
    return found


def lite_remaining(stats: dict[str, float], started: float | None) -> Remaining | None:
    """What pulsar-lite holds for the subscription, from ``parse_metrics``.

    Its backlog gauge counts every entry after the first unacked one, acked or not (an
    ack out of order leaves a hole it does not subtract), so the count is messages stored
    on the topic minus distinct acks of the subscription: exact while both live counters
    cover the subscription's whole life, i.e. the server has not restarted since
    ``setup`` (``started``, its process start time then). Otherwise (or without the
    counters) the backlog gauge: at least the true count. ``in_flight`` is the unacked
    gauge (delivered to open consumers, receiver queues included) when the gauges are
    used, else None. None if the page has neither."""
    same_server = started is not None and stats.get("started") == started
    if same_server and "in" in stats and "acked" in stats:
        return Remaining(max(0, int(stats["in"] - stats["acked"])), None, None)
    if "backlog" not in stats:
        return None
    return Remaining(int(stats["backlog"]), None, int(stats.get("unacked", 0)))


def parse_topic_stats(stats: dict[str, Any], subscription: str) -> tuple[int, int] | None:
    """(backlog, unacked) of ``subscription`` from the admin API's topic stats."""
    sub = stats.get("subscriptions", {}).get(subscription)
    if sub is None:
        return None
    return int(sub.get("msgBacklog", 0)), int(sub.get("unackedMessages", 0))
