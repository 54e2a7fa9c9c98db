"""Tests find the committed run archives by what git holds: a user's own run beside a
committed one (the README's first command writes into the same results/) changes nothing."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from tests.fixtures.committed import ROOT, committed_runs, copy_committed

PATTERN = "results/*_quickstart_nats-r3_5t-1s-2r"


def test_a_users_own_run_beside_the_committed_one_is_not_taken_for_it(tmp_path: Path) -> None:
    before = committed_runs(PATTERN)
    assert len(before) == 1, before  # the README's committed quickstart run
    [committed] = before
    # what `scripts/mqlab run scenarios/quickstart.toml` leaves: a newer run of the same name
    own = (
        ROOT
        / "results"
        / f"2999-01-01T00-00-00Z-{uuid.uuid4().hex[:6]}_quickstart_nats-r3_5t-1s-2r"
    )
    own.mkdir()
    try:
        (own / "manifest.json").write_text(json.dumps({"format_version": 1}))
        (committed / f"stray-{uuid.uuid4().hex[:6]}.txt").write_text("written by a user\n")
        # a glob sees the user's runs too (this one, and any quickstart run before)
        assert {committed, own} <= set(ROOT.glob(PATTERN))
        assert committed_runs(PATTERN) == [committed]
        copied = copy_committed(committed, tmp_path / "run")
        assert not list(copied.glob("stray-*"))  # only the files git tracks are copied
        assert (copied / "manifest.json").read_bytes() == (committed / "manifest.json").read_bytes()
    finally:
        shutil.rmtree(own)
        for stray in committed.glob("stray-*.txt"):
            stray.unlink()
