"""How every report and command shows a figure the summary could not compute.

The summary leaves such a figure null and says why: in the ``unknown`` column of the
``runs`` table (JSON) and the ``"unknown"`` dict of ``summary.json``, keyed by figure
(``lost``, ``received``, ``processing_us_below_zero``, ...).
"""

from __future__ import annotations

import json
from typing import Any

UNKNOWN = "unknown"


def reasons(run: dict[str, Any]) -> dict[str, str]:
    """{figure: why it is null} of a ``runs`` row or a ``summary.json`` document."""
    raw = run.get("unknown")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or "{}")
        except ValueError:
            return {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def why(run: dict[str, Any], field: str) -> str | None:
    """Why ``field`` (a ``runs`` column, e.g. ``delivery_lost``) is null; None when known."""
    if run.get(field) is not None:
        return None
    r = reasons(run)
    return r.get(field.removeprefix("delivery_")) or r.get(field) or "not in the summary"


def show(value: Any, spec: str = ",") -> str:
    """``value`` formatted with ``spec``, or "unknown" when null."""
    return UNKNOWN if value is None else format(value, spec)
