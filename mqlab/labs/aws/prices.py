"""Estimated cost per hour of a lab, from the small price table shipped as prices.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mqlab.errors import InfraError

PRICES_FILE = Path(__file__).with_name("prices.json")
ACCEPTED_VERSIONS = (1,)


@dataclass(frozen=True)
class NodeGroup:
    role: str  # broker, sender, receiver
    count: int
    instance_type: str


@dataclass(frozen=True)
class CostEstimate:
    usd_per_hour: float | None  # None when an instance type or region is not in the table
    instances_usd_per_hour: float | None
    ebs_usd_per_hour: float | None
    missing: tuple[str, ...]  # "r6i.large in ap-south-1", ...
    recorded: str  # date the prices were taken
    source: str

    def describe(self) -> str:
        if self.usd_per_hour is None:
            return (
                f"cost unknown: no price for {', '.join(self.missing)} "
                f"(table of {self.recorded}, {PRICES_FILE.name})"
            )
        return (
            f"~${self.usd_per_hour:.2f}/hour on demand (instances "
            f"${self.instances_usd_per_hour:.2f} + EBS ${self.ebs_usd_per_hour:.2f}; "
            f"prices of {self.recorded})"
        )


@cache
def price_table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PRICES_FILE.read_text())
    if data.get("format_version") not in ACCEPTED_VERSIONS:
        raise InfraError(
            f"{PRICES_FILE}: unsupported format_version {data.get('format_version')!r}"
        )
    return data


def estimate(region: str, groups: list[NodeGroup], ebs_type: str, ebs_size_gb: int) -> CostEstimate:
    """On-demand cost per hour of ``groups`` of nodes, each with one EBS volume."""
    table = price_table()
    hourly = table["instance_hourly"].get(region, {})
    ebs = table["ebs_gb_month"].get(region, {})
    missing: list[str] = []
    inst_total = 0.0
    nodes = 0
    for g in groups:
        if g.count == 0:
            continue
        nodes += g.count
        price = hourly.get(g.instance_type)
        if price is None:
            missing.append(f"{g.instance_type} in {region}")
        else:
            inst_total += g.count * float(price)
    gb_month = ebs.get(ebs_type)
    if gb_month is None:
        missing.append(f"EBS {ebs_type} in {region}")
        ebs_total = 0.0
    else:
        ebs_total = nodes * ebs_size_gb * float(gb_month) / float(table["hours_per_month"])
    if missing:
        return CostEstimate(
            None, None, None, tuple(dict.fromkeys(missing)), table["recorded"], table["source"]
        )
    return CostEstimate(
        round(inst_total + ebs_total, 4),
        round(inst_total, 4),
        round(ebs_total, 4),
        (),
        table["recorded"],
        table["source"],
    )
