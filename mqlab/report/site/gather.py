"""What the site shows of each run, read the way the other commands read it: the run as
`mqlab ls` lists it (:mod:`mqlab.report.listing`), and, when it is summarized,
its summary tables as `mqlab report` reads them (``summary/*.parquet``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from mqlab.analysis import catalog
from mqlab.archive import layout
from mqlab.archive.formats import V1_FIX
from mqlab.errors import ArchiveError, MqlabError
from mqlab.report import listing

LOG = logging.getLogger(__name__)

TABLES = ("windows", "latency", "timeline", "problems")


class SiteError(MqlabError):
    """The site cannot be written (no results directory, no runs, a bad --out)."""


@dataclass
class SiteRun:
    """One run of the site. ``run`` is its ``runs`` row (None when not summarized, and
    ``not_summarized`` says what to do); ``ls`` is the row `mqlab ls` shows."""

    listed: listing.Listed
    ls: dict[str, Any]
    run: dict[str, Any] | None = None
    not_summarized: str | None = None
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # its ``faults`` rows; None when not read, and ``faults_unknown`` says why
    faults: list[dict[str, Any]] | None = None
    faults_unknown: str | None = None

    @property
    def run_id(self) -> str:
        return self.listed.info.run_id

    @property
    def path(self) -> Path:
        return self.listed.info.path

    @property
    def summary(self) -> dict[str, Any] | None:
        return self.listed.info.summary

    @property
    def fault_log(self) -> list[dict[str, Any]]:
        """The faults the run injected, as its manifest logged them."""
        return list(self.listed.info.manifest.get("faults") or [])

    @property
    def had_faults(self) -> bool:
        """Faults were injected: the run has fault rows, or they are unknown and the
        manifest logged some."""
        return bool(self.faults) or (self.faults is None and bool(self.fault_log))

    @property
    def slug(self) -> str:
        """The run's folder in the site, URL-quoted (run ids are directory names)."""
        return quote(self.run_id, safe="")

    @property
    def href(self) -> str:
        """The run page, relative to the site's root."""
        return f"runs/{self.slug}/index.html"


@dataclass
class Gathered:
    runs: list[SiteRun]
    warnings: list[str]  # one line per run left out, naming the file and the fix


def _skip_unreadable(x: listing.Listed) -> str:
    path = x.info.path
    problem = x.problem or "unreadable"
    if problem.startswith("archive format_version 1"):
        fix = V1_FIX
    else:
        fix = f"repair or remove {path}"
        if (path / layout.SCENARIO).is_file():
            fix += f", or re-run its scenario (mqlab run {path / layout.SCENARIO})"
    return f"{path}: {problem}; left out of the site ({fix})"


def _read_tables(r: SiteRun) -> str | None:
    """Fill ``r.run`` and ``r.tables`` from the run's summary tables; a warning line when
    they exist but cannot be read (then the run is left out)."""
    try:
        rows = catalog.read_run_table(r.path, "runs").to_pylist()
        if not rows:
            raise ArchiveError(f"{catalog.run_file(r.path, 'runs')}: no row")
        tables = {t: catalog.read_run_table(r.path, t).to_pylist() for t in TABLES}
    except ArchiveError as err:
        if not catalog.run_file(r.path, "runs").is_file():
            # not summarized: the run is listed, its page says how to summarize it
            r.not_summarized = str(err)
            return None
        return f"{err}; left out of the site (re-summarize it: mqlab summarize {r.path})"
    except (OSError, pa.ArrowException, KeyError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return (
            f"{r.path / layout.SUMMARY_DIR}: unreadable ({first}); left out of the site "
            f"(re-summarize it: mqlab summarize {r.path})"
        )
    run = dict(rows[0])
    # the row keeps the directory it was summarized in; the site reads where it is now
    run["run_dir"] = str(r.path)
    r.run, r.tables = run, tables
    _read_faults(r)
    return None


def _read_faults(r: SiteRun) -> None:
    """Fill ``r.faults``; when the table is missing (a summary from before fault figures)
    or unreadable, the run is still shown and its fault figures are unknown."""
    try:
        r.faults = catalog.read_run_table(r.path, "faults").to_pylist()
    except ArchiveError as err:
        r.faults_unknown = str(err)
    except (OSError, pa.ArrowException, KeyError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        r.faults_unknown = (
            f"{catalog.run_file(r.path, 'faults')}: unreadable ({first}); "
            f"re-summarize it: mqlab summarize {r.path}"
        )
    if r.faults_unknown:
        LOG.info("%s: fault figures unknown (%s)", r.path, r.faults_unknown)


def gather(results_dir: Path | str) -> Gathered:
    """Every readable run under ``results_dir``, oldest first, and a warning line for
    each run left out. Raises :class:`SiteError` when there is nothing to show."""
    results = Path(results_dir)
    if not results.is_dir():
        raise SiteError(
            f"{results}: no such results directory (give --results DIR, the directory "
            "`mqlab run` archives runs into; default ./results)"
        )
    listed = listing.list_runs(results)
    if not listed:
        raise SiteError(
            f"{results}: no run archives in it (a run directory holds {layout.MANIFEST}; "
            "`mqlab run SCENARIO` writes one)"
        )
    runs, warnings = [], []
    for x in listed:
        if x.problem:
            warnings.append(_skip_unreadable(x))
            continue
        r = SiteRun(x, listing.row(x))
        problem = _read_tables(r)
        if problem:
            warnings.append(problem)
            continue
        runs.append(r)
    if not runs:
        raise SiteError(
            f"{results}: none of its {len(listed)} run archive(s) can be read; "
            f"the first: {warnings[0]}"
        )
    return Gathered(runs, warnings)
