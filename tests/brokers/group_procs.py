"""Which processes still belong to the process groups a launcher started (read from /proc)."""

from __future__ import annotations

from pathlib import Path


def in_groups(pgids: set[int]) -> list[int]:
    """PIDs of live (non-zombie) processes whose process group is one of ``pgids``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            found.append(int(stat.parent.name))
    return found
