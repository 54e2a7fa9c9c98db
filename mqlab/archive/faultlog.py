"""The manifest's fault log (``faults``): its vocabulary, written here once.

Every other module names an action, a partition's kind or an entry's field through
these constants: the scenario (``faults[].action``, ``faults[].partition``), the faults
that carry them out and write the entries, the summary that costs them. Standard
library only, so that the scenario model (which workers import) can take the names
without the rest of the archive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# the actions a scenario's faults name, as each entry records them
KILL_NODE = "kill_node"
KILL_LEADER = "kill_leader"
RESTART_NODE = "restart_node"
PAUSE_NODE = "pause_node"
CRASH_ALL = "crash_all"
PARTITION = "partition"
NETEM = "netem"
POWER_LOSS = "power_loss"
POWER_LOSS_ALL = "power_loss_all"
FAULT_ACTIONS = (
    KILL_NODE,
    KILL_LEADER,
    RESTART_NODE,
    PAUSE_NODE,
    CRASH_ALL,
    PARTITION,
    NETEM,
    POWER_LOSS,
    POWER_LOSS_ALL,
)
# the entries that end one: a node restarted or resumed, a partition healed, a link healed
RESUME_NODE = "resume_node"
HEAL = "heal"
NETEM_END = "netem_end"
END_ACTIONS = (RESTART_NODE, RESUME_NODE, HEAL, NETEM_END)

# a partition's kind (``partition`` of a "partition" entry and its "heal"): node ``node``
# from the other brokers (clients still reach it); the leader's host from the other
# brokers (clients still reach it); every client host from the leader's host; node
# ``node`` from every other broker and client host
NODE_FROM_BROKERS = "node_from_brokers"
LEADER_FROM_BROKERS = "leader_from_brokers"
CLIENTS_FROM_LEADER = "clients_from_leader"
MAJORITY_MINORITY = "majority_minority"
PARTITION_KINDS = (NODE_FROM_BROKERS, LEADER_FROM_BROKERS, CLIENTS_FROM_LEADER, MAJORITY_MINORITY)


@dataclass
class FaultEntry:
    """One entry of the fault log: a fault applied (``action`` one of
    :data:`FAULT_ACTIONS`; ``details`` holds the scenario fault's fields and what its kind
    records: ``routes``, ``boot_ids``, ``via``, ``dev``, ...) or ended (one of
    :data:`END_ACTIONS`; a heal's ``partition``, an impairer's counts, ``routes_left``).
    :meth:`to_json` is the entry as ``manifest.json`` holds it."""

    action: str
    node: int
    at_ms: int = 0  # wall clock ms: when it struck, or ended
    nodes: int | None = None  # crash_all, power_loss_all: the cluster's nodes
    error: str | None = None  # what went wrong applying or ending it
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def applied(cls, fault: dict[str, Any], node: int, at_ms: int, **details: Any) -> FaultEntry:
        """The entry of a fault applied: ``fault`` is the scenario fault's fields."""
        rest = {k: v for k, v in fault.items() if k not in ("action", "node")}
        return cls(str(fault["action"]), node, at_ms, details={**rest, **details})

    def to_json(self) -> dict[str, Any]:
        out = {**self.details, "action": self.action, "node": self.node, "at_ms": self.at_ms}
        if self.nodes is not None:
            out["nodes"] = self.nodes
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FaultEntry:
        rest = {
            k: v for k, v in d.items() if k not in ("action", "node", "at_ms", "nodes", "error")
        }
        return cls(d["action"], d["node"], d["at_ms"], d.get("nodes"), d.get("error"), rest)


def netem_label(f: dict[str, Any]) -> str:
    """``netem: node 1, delay 50 ms ± 10 ms, loss 2 %`` from a manifest entry, with the way
    it was done when the entry says (``netem (nfqueue impairer): …``)."""
    delay, jitter, loss = (float(f.get(k) or 0) for k in ("delay_ms", "jitter_ms", "loss_pct"))
    parts = []
    if delay or jitter:
        parts.append(f"delay {delay:g} ms" + (f" ± {jitter:g} ms" if jitter else ""))
    if loss:
        parts.append(f"loss {loss:g} %")
    via = f" ({f['via']})" if f.get("via") else ""
    return f"{NETEM}{via}: node {f.get('node')}, " + ", ".join(parts)
