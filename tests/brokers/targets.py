"""The brokers the driver contract suite runs against, each on its real local server: every
broker folder's descriptor declares its targets (``Broker.contract``), collected here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mqlab.brokers import registry
from mqlab.brokers.descriptor import Contract


@dataclass(frozen=True)
class Target:
    broker: str
    contract: Contract

    def settings(self) -> Any:
        """The driver's Settings with the target's short timeouts."""
        return registry.driver_class(self.broker).Settings(**self.contract.settings)


TARGETS: dict[str, Target] = {
    c.name: Target(b.name, c) for b in registry.BROKERS.values() for c in b.contract
}
