"""An import-linter contract type: the folders (subpackages) of a package are independent.

``mqlab.brokers`` holds one folder per system beside a few shared modules (the driver
interface, the registry, the cluster base). A broker folder may import the shared
modules, never another broker's folder, directly or through a chain of imports. The
folders are found in the import graph, so a new broker is covered without a list.
"""

from __future__ import annotations

from typing import cast

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


class FoldersIndependent(Contract):
    """``container``'s subpackages do not import each other."""

    type_name = "folders_independent"

    container = fields.StringField()

    def folders(self, graph: ImportGraph) -> list[str]:
        name = cast(str, self.container)
        return sorted(c for c in graph.find_children(name) if graph.find_children(c))

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        folders = self.folders(graph)
        chains: list[tuple[str, str, list[str]]] = []
        for a in folders:
            for b in folders:
                if a == b:
                    continue
                chain = graph.find_shortest_chains(importer=a, imported=b, as_packages=True)
                for c in sorted(chain):
                    chains.append((a, b, list(c)))
        return ContractCheck(
            kept=not chains, warnings=[], metadata={"chains": chains, "folders": folders}
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        for a, b, chain in check.metadata["chains"]:
            output.print_error(f"{a} imports {b}: {' -> '.join(chain)}")
            output.new_line()
