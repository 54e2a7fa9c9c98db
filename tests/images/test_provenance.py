from __future__ import annotations

import pytest

from mqlab.provenance import flake_provenance


def test_outside_the_flake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQLAB_FLAKE_REV", raising=False)
    monkeypatch.delenv("MQLAB_NIXPKGS_REV", raising=False)
    assert flake_provenance() == {"flake_rev": None, "nixpkgs_rev": None}


def test_from_the_flake_wrappers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQLAB_FLAKE_REV", "a" * 40)
    monkeypatch.setenv("MQLAB_NIXPKGS_REV", "78e9c786dc08cd4f3420c2395cd977206a9b1da2")
    assert flake_provenance() == {
        "flake_rev": "a" * 40,
        "nixpkgs_rev": "78e9c786dc08cd4f3420c2395cd977206a9b1da2",
    }
