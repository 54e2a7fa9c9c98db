"""A netns lab recorded as a live "AWS" lab, as ``mqlab infra up`` leaves one: its lab
record (a price per hour, two hours to live), the lab's key next to it, its inventory of
kind ``aws``, and the broker image's ``/etc/mqlab/broker.json`` (a file of the test).
Shared by the tests of ``target = "aws"`` runs (``test_fleet_aws*.py``)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mqlab.brokers import cluster as base
from mqlab.labs.aws import inventory
from mqlab.labs.aws.keys import PRIVATE_NAME
from mqlab.labs.aws.labs import LabDir, LabRecord
from mqlab.labs.netns import plan as netns_plan
from mqlab.scenario.model import Scenario


def record_live_lab(
    up: netns_plan.Lab,
    lab_id: str,
    scenario_path: Path,
    scenario: Scenario,
    price_per_hour: float,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> LabDir:
    """Record the netns lab ``up`` as the live AWS lab ``lab_id`` of ``scenario``."""
    broker = scenario.broker
    lab = LabDir.for_id(lab_id)
    lab.path.mkdir(parents=True)
    now = datetime.now(UTC)
    lab.save(
        LabRecord(
            lab_id=lab_id,
            scenario=str(scenario_path),
            scenario_name=scenario.name,
            broker=broker,
            region="eu-west-1",
            created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            expires_at=(now + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            state="up",
            cost_usd_per_hour=price_per_hour,
        )
    )
    assert up.inventory.ssh_key is not None
    shutil.copy(up.inventory.ssh_key, lab.path / PRIVATE_NAME)
    inventory.save(
        replace(
            up.inventory,
            kind="aws",
            lab_id=lab_id,
            broker=broker,
            price_per_hour_usd=price_per_hour,
            ssh_key=lab.path / PRIVATE_NAME,
        ),
        lab.inventory_file,
    )
    info = tmp_path / "broker.json"
    info.write_text(json.dumps({"broker": broker, "version": "image-under-test"}))
    monkeypatch.setattr(base, "IMAGE_INFO", str(info))
    return lab
