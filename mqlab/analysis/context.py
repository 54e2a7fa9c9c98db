"""A run's context figures (clock error bound, lab cost) and its order requirement: the
``runs`` columns that say how far its figures can be trusted and what it cost, and the
problems and failures they make."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from mqlab.analysis.plan import RunMeta

CLOCK_PROBLEM = "clock error bound "  # how the problem line of a run over budget starts


def clock_problem(bound_ms: float, budget_ms: float) -> str:
    """The ``problems`` line of a run whose clock error bound exceeds its budget."""
    return (
        f"{CLOCK_PROBLEM}{bound_ms:g} ms exceeds the budget {budget_ms:g} ms: end-to-end "
        "latencies between hosts are uncertain by that much"
    )


def _instant(text: str) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def run_hours(started_at: str, ended_at: str) -> float | None:
    """The run's wall time in hours (manifest ``ended_at - started_at``); None when either
    is missing or the end is before the start."""
    start, end = _instant(started_at or ""), _instant(ended_at or "")
    if start is None or end is None or end < start:
        return None
    return (end - start).total_seconds() / 3600


def cost_figures(
    meta: RunMeta, delivered: int | None, delivered_why: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """(``run_hours``, ``cost_usd``, ``cost_per_million_delivered_usd``; {figure: why
    null}). cost_usd = price per hour x run hours; per million delivered = cost_usd /
    (``delivered`` / 1e6), ``delivered`` being the unique messages received. Rounded to
    1e-6 USD."""
    hours = run_hours(meta.started_at, meta.ended_at)
    out: dict[str, Any] = {
        "run_hours": None if hours is None else round(hours, 6),
        "cost_usd": None,
        "cost_per_million_delivered_usd": None,
    }
    why: dict[str, str] = {}
    price = meta.price_per_hour_usd
    if price is None:
        why["cost_usd"] = f"the lab ({meta.lab_kind or 'local'}) has no price per hour"
    elif hours is None:
        why["cost_usd"] = "the manifest lacks the run's start or end time"
    if "cost_usd" in why:
        why["cost_per_million_delivered_usd"] = why["cost_usd"]
        return out, why
    assert price is not None and hours is not None
    cost = price * hours
    out["cost_usd"] = round(cost, 6)
    if delivered is None:
        why["cost_per_million_delivered_usd"] = (
            f"messages delivered unknown: {delivered_why or 'not in the summary'}"
        )
    elif delivered == 0:
        why["cost_per_million_delivered_usd"] = "no message was delivered"
    else:
        out["cost_per_million_delivered_usd"] = round(cost / (delivered / 1e6), 6)
    return out, why


def context_figures(
    meta: RunMeta, totals: dict[str, int | None], unknown: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``runs`` columns of the run's context (clock, lab, cost) and {figure: why it
    is null}."""
    cost, why = cost_figures(meta, totals["unique_received"], unknown.get("unique_received"))
    if meta.clock_bound_ms is None:
        why["clock_bound_ms"] = meta.clock_unknown or "not in the manifest"
    return {**cost, "context_unknown": json.dumps(why, sort_keys=True)}, why


FAILED = "failed"  # the status of a run that broke a requirement of its scenario


def order_problem(violations: int) -> str:
    """The ``problems`` (and ``failures``) line of a strict-order run that reordered."""
    return f"reordered {violations:,} messages under a strict order requirement"


def order_figures(requirement: str, reordered: int | None) -> tuple[int | None, list[str]]:
    """(``order_violations``, the failures it makes). Under ``workload.order = "strict"``
    every message a receiver thread got out of its sender's order (``delivery_reordered``:
    first deliveries out of place, n - LIS per receiver thread and sender) violates the
    requirement, and any violation fails the run; an unknown count fails nothing (the
    run is partial already). Under "any" there is no requirement: None."""
    if requirement != "strict":
        return None, []
    if reordered is None or reordered == 0:
        return reordered, []
    return reordered, [order_problem(reordered)]
