"""The published data sets, found by discovery: every module of :mod:`mqlab.published`
that defines ``PUBLISHED`` (a :class:`~mqlab.published.base.Published`) is a set, named by
its ``name``. Adding a set is one module (and its CSV under ``data/``); nothing lists the
sets by hand. The modules are imported on first use (scenario validation asks for names)."""

from __future__ import annotations

import functools
import importlib
import pkgutil

import mqlab.published
from mqlab.published.base import Published, ReferenceError

NOT_SETS = frozenset({"base", "sets", "data"})


@functools.cache
def _sets() -> dict[str, Published]:
    found: dict[str, Published] = {}
    for info in pkgutil.iter_modules(mqlab.published.__path__):
        if info.name in NOT_SETS or info.ispkg:
            continue
        module = importlib.import_module(f"{mqlab.published.__name__}.{info.name}")
        published = getattr(module, "PUBLISHED", None)
        if published is not None:
            if published.name in found:
                raise RuntimeError(f"two published sets named {published.name!r}")
            found[published.name] = published
    return found


def get(name: str) -> Published:
    sets = _sets()
    if name not in sets:
        raise ReferenceError(
            f"--reference {name}: unknown published data set (known: {', '.join(sorted(sets))})"
        )
    return sets[name]


def names() -> list[str]:
    return sorted(_sets())
