"""Published experiments as reference data: each data set (``mqlab/published/data/NAME.csv``)
names its experiments and lays a run out next to its rows in the seed's own layout.

A set is a :class:`Published`: its name, its source (article, hardware, settings),
its experiments, and ``blocks(runs, experiment)``: the tables ``mqlab compare
--reference`` prints and the report writes, each a :class:`Block` whose rows put
mqlab's figures beside the published ones, with the set-up differences as notes.
A scenario names the experiment it reproduces in ``[reference]`` (set, experiment);
the run's archived ``scenario.toml`` keeps it (:func:`of_run`).

This module imports nothing of mqlab but its errors: each set's module imports it, and
:mod:`mqlab.published.sets` finds the sets (no set is listed by hand)."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mqlab.errors import MqlabError


class ReferenceError(MqlabError):
    """An unknown reference data set or experiment was asked for."""


@dataclass(frozen=True)
class Block:
    """One table: a run (or runs) next to published rows, as the seed lays them out."""

    title: str
    headers: tuple[str, ...]
    rows: list[tuple[Any, ...]]  # cells: str, int, float or None (unknown)
    notes: list[str] = field(default_factory=list)  # set-up differences, marks, mapping


class Published(Protocol):
    name: str
    source: str  # the article or report, its hardware and settings, in one line

    def experiments(self) -> set[str]:
        """The experiment names a scenario's ``reference.experiment`` may take."""
        ...

    def blocks(self, runs: Sequence[dict[str, Any]], experiment: str | None) -> list[Block]:
        """The runs (``runs`` table rows) beside the published rows of ``experiment``
        (None: the experiments that match each run, as the set decides)."""
        ...


def threads_nodes_title(run: dict[str, Any]) -> str:
    """A block's title for sets matched by threads and nodes (mqperf's tables)."""
    return (
        f"{run['run_id']} ({run['broker']}, {run['sender_threads']}/"
        f"{run['receiver_threads']} threads, {run['sender_nodes']}s-{run['receiver_nodes']}r)"
    )


def of_run(run_dir: Path | str) -> tuple[str, str] | None:
    """The (set, experiment) a run's scenario reproduces, from its archived scenario."""
    p = Path(run_dir) / "scenario.toml"
    try:
        doc = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    ref = doc.get("reference")
    if not isinstance(ref, dict) or "set" not in ref or "experiment" not in ref:
        return None
    return str(ref["set"]), str(ref["experiment"])


def measurement_notes(
    run: dict[str, Any], published_from: str = "mqperf's from the actual one"
) -> list[str]:
    """Where a run's figures are measured differently from the published ones
    (``published_from``: from which send time the published latencies count)."""
    notes = []
    if run.get("stand_in"):
        notes.append(
            f"STAND-IN: {run['stand_in']} served this run, not {run['broker']}: its figures "
            f"are not {run['broker']}'s and do not compare with the published ones"
        )
    if run.get("client_bound"):
        notes.append(
            "CLIENT-BOUND: this run's load generator was its limit (see its report's load "
            "generator section), not the broker"
        )
    if run.get("receivers_behind"):
        notes.append(
            "RECEIVERS BEHIND: this run's processing latency is mostly queueing in the broker"
        )
    lag = run.get("sender_lag_ms_max")
    if lag:
        notes.append(
            f"this run's senders fell up to {lag:,} ms behind their fixed-rate schedule; "
            f"mqlab's latencies count from each message's intended send time, {published_from}"
        )
    return notes
