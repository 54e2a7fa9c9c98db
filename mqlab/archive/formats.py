"""Format versions of the run archive, and JSON records: written atomically, read with
a version check.

Every JSON file of a run carries ``"format_version"``. This mqlab writes version 2 and
reads version 2. Version 1 archives (mqlab 0.1) measured some figures differently
(actual instead of intended send stamps, 32-bit sequence bitmaps, reorders counted
against the highest seq seen); their raw files are refused with a one-line error that
says how to get figures for them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mqlab.errors import ArchiveError

FORMAT_VERSION = 2
ACCEPTED_VERSIONS = (2,)
V1_FIX = (
    "archive format_version 1 was written by mqlab 0.1, whose figures used older "
    "definitions; re-run its scenario to get a version 2 archive "
    "(`mqlab run RUN_DIR/scenario.toml`), or summarize it with mqlab 0.1 "
    "(git checkout 57a621b; scripts/mqlab summarize RUN_DIR)"
)


def check_version(path: Path | str, version: Any) -> None:
    """Raise a one-line ArchiveError unless ``version`` is one this mqlab reads."""
    if version in ACCEPTED_VERSIONS:
        return
    if version == 1:
        raise ArchiveError(f"{path}: {V1_FIX}")
    raise ArchiveError(
        f"{path}: format_version {version!r} is not supported (this mqlab reads "
        f"{', '.join(map(str, ACCEPTED_VERSIONS))}; a newer mqlab wrote it?)"
    )


def read_json(path: Path | str) -> dict[str, Any]:
    """A JSON record of the archive, version-checked; one-line ArchiveError otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArchiveError(f"{path}: missing") from None
    except (OSError, ValueError) as e:
        raise ArchiveError(f"{path}: unreadable ({e})") from None
    if not isinstance(data, dict):
        raise ArchiveError(f"{path}: not a JSON object")
    check_version(path, data.get("format_version"))
    return data


def write_json(path: Path | str, data: dict[str, Any]) -> None:
    """Write ``data`` (``format_version`` added when absent) atomically: a reader sees the
    old file or the new one, never half of one."""
    path = Path(path)
    doc = {"format_version": FORMAT_VERSION, **data}
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
