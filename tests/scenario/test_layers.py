"""The scenario package stands below the labs and the published sets: loading a scenario
imports no cloud code and no reference data, and a worker's Workload imports no loading."""

from __future__ import annotations

import subprocess
import sys


def _modules(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {m for m in out.stdout.split() if m.startswith("mqlab")}


def test_loading_a_scenario_imports_no_lab_and_no_published_set() -> None:
    mods = _modules("from mqlab.scenario.load import load_scenario")
    assert not {m for m in mods if m.startswith(("mqlab.labs", "mqlab.published"))}


def test_a_workload_comes_with_the_model_alone() -> None:
    mods = _modules("from mqlab.scenario.model import Workload")
    assert mods == {
        "mqlab",
        "mqlab.archive",
        "mqlab.archive.faultlog",
        "mqlab.errors",
        "mqlab.typed",
        "mqlab.scenario",
        "mqlab.scenario.model",
    }


def test_the_aws_checks_register_themselves_when_the_labs_are_imported() -> None:
    code = (
        "import mqlab.labs.aws\n"
        "from mqlab.labs.aws.validate import on_aws\n"
        "from mqlab.scenario import checks\n"
        "assert on_aws in checks.EXTRA"
    )
    _modules(code)
