"""Write the site: ``index.html`` (the experiments and every run), ``experiments/<slug>.html``
(a page per experiment, its charts in ``experiments/<slug>/``), ``brokers.html``,
``durability.html``, ``compare.html``, ``site.css``, ``site.js`` and
``runs/<run id>/index.html`` with the run's plots (drawn by the report's plotting code)."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from mqlab.published import reference
from mqlab.report import against, plots
from mqlab.report.site import compare_page, experiments, overview, pages, run_page
from mqlab.report.site.gather import SiteError, gather

LOG = logging.getLogger(__name__)

MARKER = ".mqlab-site"  # marks a folder this command wrote, so it may rewrite it
ASSETS = ("site.css", "site.js")

__all__ = ["SiteError", "SiteResult", "write_site"]


@dataclass(frozen=True)
class SiteResult:
    index: Path
    runs: int
    experiments: int
    warnings: list[str]  # one line per run archive left out


def _prepare(out: Path) -> None:
    """Make ``out`` ready: new, empty, or written by this command before (its run pages
    are then removed, so runs gone from the results are gone from the site)."""
    if out.exists() and not out.is_dir():
        raise SiteError(f"{out}: exists and is not a directory (give another --out DIR)")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise SiteError(
            f"{out}: not empty and not written by `mqlab site` (no {MARKER} in it); "
            "give another --out DIR or empty it"
        )
    for sub in ("runs", "experiments"):
        if (out / sub).is_dir():
            shutil.rmtree(out / sub)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by `mqlab site`, which rewrites this folder\n")


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def write_site(results_dir: Path | str, out_dir: Path | str) -> SiteResult:
    """Write the site of every readable run under ``results_dir`` into ``out_dir``.
    Raises :class:`SiteError` (one line) when there is nothing to show or ``out_dir``
    cannot be used; an unreadable run is left out with a warning line."""
    found = gather(results_dir)
    out = Path(out_dir)
    _prepare(out)
    for name in ASSETS:
        text = resources.files("mqlab.report.site").joinpath(name).read_text(encoding="utf-8")
        _write(out / name, text)

    summarized = [r.run for r in found.runs if r.run is not None]
    found_matches = reference.against_reference(summarized, against.REFERENCE)
    matches = {m.run["run_id"]: m for m in found_matches}
    for r in found.runs:
        run_dir = out / "runs" / r.run_id
        run_dir.mkdir(parents=True)
        images: list[str] = []
        if r.run is not None:
            images = plots.plot_run(
                r.run,
                r.tables.get("latency", []),
                r.tables.get("timeline", []),
                run_dir,
                (r.listed.info.manifest or {}).get("faults") or [],
                reuse_from=r.path,  # its report's plots, when drawn from the same inputs
            )
        _write(run_dir / "index.html", run_page.run_page(r, images, matches.get(r.run_id)))
    _write(out / "compare.html", compare_page.compare_page(found.runs, matches))
    groups = experiments.group(found.runs, results_dir)
    (out / "experiments").mkdir()
    for ex in groups:
        priced = any(r.ls.get("price_per_hour_usd") is not None for r in ex.runs)
        rows = [pages.index_row(r, priced, root="../") for r in ex.runs]
        matrix = pages.durability(ex.runs, root="../")
        html = experiments.experiment_page(
            ex, rows, pages.runs_header(priced), matrix, out / "experiments"
        )
        _write(out / ex.href, html)
    _write(out / "brokers.html", overview.brokers_page(found.runs))
    _write(out / "durability.html", overview.durability_page(found.runs))
    index = out / "index.html"
    _write(index, pages.index_page(groups, str(results_dir), found.warnings))
    return SiteResult(index, len(found.runs), len(groups), found.warnings)
