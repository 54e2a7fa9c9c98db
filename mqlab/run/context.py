"""What the phases of one run share: the :class:`RunContext`, how a run reports progress
(:class:`Observer`) and what it gives back (:class:`RunResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqlab.archive import layout
from mqlab.archive.formats import write_json
from mqlab.archive.manifest import Manifest
from mqlab.brokers.base import Driver
from mqlab.brokers.cluster import LocalCluster
from mqlab.labs.placement import Placement
from mqlab.run.workers import Worker
from mqlab.scenario.model import Scenario


class Observer:
    """How a run reports progress; the CLI subclasses it to draw (only the CLI prints)."""

    def phase(self, text: str) -> None: ...

    def progress(self, elapsed_s: float, totals: dict[str, int], expected: int | None) -> None: ...

    def finished(self, result: RunResult) -> None: ...


@dataclass(frozen=True)
class RunResult:
    scenario: Scenario
    run_dir: Path
    status: str
    end_reason: str
    summary: dict[str, Any]


@dataclass
class RunContext:
    """One run as its phases go: set-up fills in the cluster and the drivers (one per
    queue, ``drivers[0]`` queue 0's) and the clock offsets measured before the run;
    the receivers and senders phases start the workers; every phase writes into the
    manifest, which :meth:`save` writes to the archive."""

    scenario: Scenario
    run_dir: Path
    results_dir: Path
    placement: Placement
    observer: Observer
    manifest: Manifest
    cluster: LocalCluster | None = None
    drivers: list[Driver] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    receivers: list[Worker] = field(default_factory=list)
    senders: list[Worker] = field(default_factory=list)
    before: dict[str, Any] = field(default_factory=dict)  # clock offsets, by host
    shape: dict[str, list[int]] = field(default_factory=dict)  # processes per node, by role

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def save(self) -> None:
        """Write the manifest as it stands."""
        write_json(self.run_dir / layout.MANIFEST, self.manifest.to_json())
