"""The layering contract (pyproject.toml [tool.importlinter]) holds for mqlab, and the
contract type that keeps broker folders apart finds a folder importing another one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.architecture.folders import FoldersIndependent

ROOT = Path(__file__).resolve().parents[2]


def test_mqlab_keeps_its_layers() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    ("b_driver", "broken"),
    [
        ("from pkgx.brokers import base\n", []),
        ("from pkgx.brokers.a import driver\n", [("pkgx.brokers.b", "pkgx.brokers.a")]),
        # through a shared module: b -> shared -> a is a folder importing another too
        ("from pkgx.brokers import shared\n", [("pkgx.brokers.b", "pkgx.brokers.a")]),
    ],
)
def test_folders_contract_finds_a_folder_importing_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, b_driver: str, broken: list[tuple[str, str]]
) -> None:
    _package(
        tmp_path,
        {
            "pkgx/__init__.py": "",
            "pkgx/brokers/__init__.py": "",
            "pkgx/brokers/base.py": "",
            "pkgx/brokers/shared.py": "from pkgx.brokers.a import driver\n",
            "pkgx/brokers/a/__init__.py": "",
            "pkgx/brokers/a/driver.py": "from pkgx.brokers import base\n",
            "pkgx/brokers/b/__init__.py": "",
            "pkgx/brokers/b/driver.py": b_driver,
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("pkgx", cache_dir=None)
    contract = FoldersIndependent(
        name="folders", session_options={}, contract_options={"container": "pkgx.brokers"}
    )
    check = contract.check(graph, verbose=False)
    assert contract.folders(graph) == ["pkgx.brokers.a", "pkgx.brokers.b"]
    assert check.kept is (not broken)
    assert [(a, b) for a, b, _ in check.metadata["chains"]] == broken
