"""A fault aimed at the leader waits for an election in progress, within a bound."""

from __future__ import annotations

from typing import Any

import pytest

from mqlab.errors import ClusterError
from mqlab.faults import process


class Electing:
    """A cluster with no leader for its first ``misses`` questions, then node 2."""

    def __init__(self, misses: int):
        self.misses = misses
        self.asked = 0

    def leader(self, driver: Any) -> int:
        self.asked += 1
        if self.asked <= self.misses:
            raise ClusterError("no node names a leader of quorum queue q")
        return 2


def test_the_leader_is_asked_again_until_an_election_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process.time, "sleep", lambda _s: None)
    cluster = Electing(misses=3)
    assert process.leader(cluster, None, "kill_leader", wait_s=30) == 2  # type: ignore[arg-type]
    assert cluster.asked == 4


def test_no_leader_within_the_bound_is_one_line_naming_fault_and_wait() -> None:
    cluster = Electing(misses=10**6)
    with pytest.raises(ClusterError) as info:
        process.leader(cluster, None, "partition leader_from_brokers", wait_s=0)  # type: ignore[arg-type]
    assert str(info.value) == (
        "partition leader_from_brokers: cannot tell the leader after 0 s "
        "(no node names a leader of quorum queue q)"
    )
