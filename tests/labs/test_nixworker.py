"""The Nix worker path: what mqlab builds, copies and checks (no Nix host here: the
commands are recorded by stand-ins for ``subprocess.run`` and the host)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mqlab.errors import FleetError
from mqlab.hosts.base import Result
from mqlab.labs import nixworker

WORKER = "/nix/store/abcd1234abcd1234abcd1234abcd1234-mqlab-worker"
PY = "/nix/store/ffff0000ffff0000ffff0000ffff0000-python3-3.11.9-env"


class FakeRun:
    def __init__(self, answers: list[tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], dict[str, str] | None]] = []

    def __call__(self, cmd: list[str], **kw: Any) -> Any:
        self.calls.append((cmd, kw.get("env")))
        rc, out, err = self.answers.pop(0)
        return subprocess.CompletedProcess(cmd, rc, out, err)


class FakeHost:
    name = "sender-0"
    user = "root"
    ssh_address = "198.51.100.7"
    port = 22
    key = Path("/labs/x/id_ed25519")
    known_hosts = Path("/labs/x/known_hosts")

    def __init__(self, valid: bool, verifies: bool = True, nixos: bool = True) -> None:
        self.valid, self.verifies, self.nixos = valid, verifies, nixos
        self.ran: list[list[str]] = []

    def run(self, cmd: list[str], check: bool = True) -> Result:
        self.ran.append(cmd)
        if cmd[:2] == ["test", "-e"]:
            return Result(0 if self.nixos else 1, "", "")
        if cmd[1] == "--check-validity":
            return Result(0 if self.valid else 1, "", "")
        if cmd[1] == "--verify-path":
            return Result(0 if self.verifies else 1, "", "path is corrupt")
        raise AssertionError(cmd)


def test_build_reads_the_store_path_and_the_worker_python() -> None:
    run = FakeRun([(0, json.dumps([{"outputs": {"out": WORKER}}]), ""), (0, PY, "")])
    worker, why = nixworker.build(Path("/src/mqlab"), run)
    assert why == "" and worker is not None
    assert (worker.store_path, worker.python) == (WORKER, f"{PY}/bin/python")
    assert worker.hash == "abcd1234abcd1234abcd1234abcd1234"
    assert run.calls[0][0][-4:] == ["build", "--no-link", "--json", "/src/mqlab#worker"]
    assert run.calls[1][0][-3:] == ["eval", "--raw", "/src/mqlab#worker.workerPython"]


def test_a_failed_build_says_why_in_one_line() -> None:
    run = FakeRun([(1, "", "warning: retrying\nerror: unable to download nixpkgs\n")])
    worker, why = nixworker.build(Path("/src/mqlab"), run)
    assert worker is None
    assert why == "nix build mqlab#worker failed: error: unable to download nixpkgs"


def test_copy_uses_the_lab_key_and_known_hosts() -> None:
    worker = nixworker.NixWorker(WORKER, f"{PY}/bin/python")
    cmd, env = nixworker.copy_command(worker, FakeHost(valid=False))
    assert cmd[-5:] == ["copy", "--to", "ssh-ng://root@198.51.100.7", WORKER, PY]
    opts = env["NIX_SSHOPTS"]
    assert "-i /labs/x/id_ed25519" in opts and "StrictHostKeyChecking=yes" in opts
    assert "UserKnownHostsFile=/labs/x/known_hosts" in opts


def test_a_host_holding_the_closure_is_not_sent_it_again() -> None:
    worker = nixworker.NixWorker(WORKER, f"{PY}/bin/python")
    run = FakeRun([])
    host = FakeHost(valid=True)
    assert nixworker.ensure_on(host, worker, lambda _m: None, run) == f"{PY}/bin/python"
    assert run.calls == []
    assert ["nix-store", "--verify-path", WORKER] in host.ran


def test_a_missing_closure_is_copied_and_a_corrupt_one_refused() -> None:
    worker = nixworker.NixWorker(WORKER, f"{PY}/bin/python")
    run = FakeRun([(0, "", "")])
    said: list[str] = []
    nixworker.ensure_on(FakeHost(valid=False), worker, said.append, run)
    assert run.calls[0][0][-5] == "copy" and said == [
        "nix copy of the worker closure abcd1234abcd1234abcd1234abcd1234 to sender-0"
    ]
    with pytest.raises(FleetError, match="does not verify"):
        nixworker.ensure_on(FakeHost(valid=True, verifies=False), worker, said.append, FakeRun([]))
    with pytest.raises(FleetError, match="sender-0: nix copy failed: no route"):
        nixworker.ensure_on(
            FakeHost(valid=False), worker, said.append, FakeRun([(1, "", "no route")])
        )


def test_nix_hosts_are_nixos_hosts() -> None:
    assert nixworker.is_nix_host(FakeHost(valid=True, nixos=True))
    assert not nixworker.is_nix_host(FakeHost(valid=True, nixos=False))
