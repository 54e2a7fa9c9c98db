"""Every broker mqlab knows, what it can do where, and where its driver lives.

The brokers are the folders of ``mqlab/brokers/``: each declares itself in its
``__init__.py`` (a :class:`~mqlab.brokers.descriptor.Broker`), and :data:`BROKERS` is
what :func:`~mqlab.brokers.descriptor.scan` finds there. Other parts read it: the
scenario loader (is this broker known?), the local cluster launcher (can it run here?),
the Nix flake checks (which brokers get an image: ``self_hosted``) and the README.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mqlab.brokers.descriptor import Broker, scan

if TYPE_CHECKING:
    from mqlab.brokers.base import Driver

BROKERS: dict[str, Broker] = scan()


def broker_info(name: str) -> Broker:
    return BROKERS[name]


def self_hosted_brokers() -> list[str]:
    """Brokers that run on our own nodes and so get a NixOS image."""
    return sorted(b.name for b in BROKERS.values() if b.self_hosted)


def driver_class(name: str) -> type[Driver]:
    """Import and return the driver class for broker ``name`` (KeyError if none)."""
    info = BROKERS[name]
    if info.driver_module is None:
        raise KeyError(name)
    module = importlib.import_module(f"mqlab.brokers.{info.driver_module}.driver")
    cls: type[Driver] = module.DRIVER
    return cls


def available_drivers() -> list[str]:
    return sorted(b.name for b in BROKERS.values() if b.driver_module is not None)


def mqperf_systems() -> dict[str, tuple[str, str | None]]:
    """mqperf 2021's system name -> (mqlab broker, None when exact else why the mapping
    is approximate), from the brokers' descriptors."""
    return {b.mqperf: (b.name, b.mqperf_note) for b in BROKERS.values() if b.mqperf}
