"""The fault log's typed entry (mqlab/archive/faultlog.py) writes the JSON the manifest
has always held, and reads it back."""

from __future__ import annotations

from mqlab.archive.faultlog import FaultEntry


def test_an_applied_fault_is_its_scenario_fields_and_what_its_kind_recorded() -> None:
    fault = {"at_s": 6.0, "action": "crash_all", "node": 0, "restart_after_s": 1.0}
    entry = FaultEntry.applied(fault, 0, 1234, boot_ids=["a"])
    entry.nodes = 3
    assert entry.to_json() == {**fault, "at_ms": 1234, "boot_ids": ["a"], "nodes": 3}
    assert FaultEntry.from_json(entry.to_json()) == entry


def test_an_ending_says_action_node_and_when_and_what_went_wrong() -> None:
    entry = FaultEntry("heal", 2, 99, details={"partition": "clients_from_leader"})
    assert entry.to_json() == {
        "action": "heal",
        "node": 2,
        "at_ms": 99,
        "partition": "clients_from_leader",
    }
    entry.error = "not healed"
    assert entry.to_json()["error"] == "not healed"
    assert FaultEntry.from_json(entry.to_json()) == entry
