"""One results directory and one site written from it, shared by the site tests
(summarizing the tiny runs and drawing the plots take a few seconds)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from mqlab.report.site import SiteResult, write_site

from .lab import SiteLab, write_lab


@dataclass
class Built:
    lab: SiteLab
    out: Path
    result: SiteResult


@pytest.fixture(scope="package")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("site")
    lab = write_lab(root / "results")
    out = root / "site"
    return Built(lab, out, write_site(lab.results, out))
