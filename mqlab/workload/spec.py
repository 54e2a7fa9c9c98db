"""What the orchestrator tells one worker process (written as JSON, read by the worker)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT_VERSION = 3


@dataclass(frozen=True)
class WorkerSpec:
    run_id: str
    worker_id: str  # "sender-00", "receiver-01"
    role: str  # "sender" | "receiver"
    node: int
    threads: int
    broker: str
    settings: dict[str, Any]  # the profile's [settings], validated again by the worker
    endpoints: dict[str, Any]
    queue: str
    workload: dict[str, Any]  # mqlab.scenario.Workload as a table
    out_dir: str
    seed: int
    host: str = "local"  # the inventory name of the host it runs on
    # receivers: sender node (as a string) -> µs to subtract from that node's end-to-end
    # latencies: this host's clock offset minus the sender host's (both to the coordinator)
    clock_corrections_us: dict[str, int] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        data = json.loads(path.read_text())
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path}: worker spec format_version {data.get('format_version')!r} "
                f"is not {FORMAT_VERSION}"
            )
        return cls(**data)
