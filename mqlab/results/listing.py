"""Filters for `mqlab ls`."""

from __future__ import annotations

from mqlab.errors import MqlabError
from mqlab.results.archive import RunInfo


def _date(text: str | None, option: str) -> str | None:
    if text is None:
        return None
    import datetime as dt

    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise MqlabError(f"--{option}: {text!r} is not a date (use YYYY-MM-DD)") from None


def filter_runs(
    runs: list[RunInfo],
    broker: str | None = None,
    scenario: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> list[RunInfo]:
    lo, hi = _date(since, "since"), _date(until, "until")
    out = []
    for r in runs:
        day = r.started_at[:10]
        if broker and r.broker != broker:
            continue
        if scenario and r.scenario_name != scenario:
            continue
        if lo and day < lo:
            continue
        if hi and day >= hi:
            continue
        out.append(r)
    return out
