"""Which Nix flake build of mqlab is running (recorded in every run manifest).

The flake's `mqlab` and `mqlab-worker` wrappers export MQLAB_FLAKE_REV (the
flake's git revision, or "dirty") and MQLAB_NIXPKGS_REV (the pinned nixpkgs
commit). Outside the flake both are None.
"""

from __future__ import annotations

import os

FLAKE_REV_ENV = "MQLAB_FLAKE_REV"
NIXPKGS_REV_ENV = "MQLAB_NIXPKGS_REV"


def flake_provenance() -> dict[str, str | None]:
    """{"flake_rev": ..., "nixpkgs_rev": ...}; None for each when not run from the flake."""
    return {
        "flake_rev": os.environ.get(FLAKE_REV_ENV) or None,
        "nixpkgs_rev": os.environ.get(NIXPKGS_REV_ENV) or None,
    }
