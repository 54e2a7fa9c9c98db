"""Data-pipeline commands: summarize, query, report, compare (thin wrappers).

``mqlab/cli/__init__.py`` registers every command of ``DATA_COMMANDS``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from mqlab.errors import ArchiveError, MqlabError

F = TypeVar("F", bound=Callable[..., Any])
RESULTS_DEFAULT = os.environ.get("MQLAB_RESULTS", "results")
results_option = click.option(
    "--results",
    "results_dir",
    type=click.Path(file_okay=False),
    default=RESULTS_DEFAULT,
    show_default=True,
    help="results directory (env MQLAB_RESULTS)",
)


def _user_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MqlabError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) < 1e15 else f"{v:g}"
    return str(v)


def echo_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[_fmt(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def _time(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--all", "all_runs", is_flag=True, help="every run under --results")
@click.option(
    "--logs",
    "logs",
    is_flag=True,
    help="PATHS are HdrHistogram interval logs (any tool's): print their figures",
)
@click.option("--json", "as_json", is_flag=True, help="JSON output")
@click.option(
    "--window-s",
    type=float,
    default=60.0,
    show_default=True,
    help="window length for the per-window figures",
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master")
@results_option
@_user_errors
def summarize(
    paths: tuple[str, ...],
    all_runs: bool,
    logs: bool,
    as_json: bool,
    window_s: float,
    master: str,
    results_dir: str,
) -> None:
    """Summarize run archives with Spark into Parquet (RUN_DIR/summary, RESULTS/.catalog)."""
    from mqlab.archive import layout
    from spark import summarize as job

    if logs:
        if not paths:
            raise click.UsageError("--logs needs at least one FILE")
        spark = job.build_session(master)
        rows, problems = job.summarize_logs(spark, paths)
        _echo_logs(rows, problems, as_json)
        return
    from mqlab.analysis.inplace import find_all_runs

    dirs = list(paths) + ([str(p) for p in find_all_runs(results_dir)] if all_runs else [])
    if all_runs and not dirs:
        raise ArchiveError(f"{results_dir}: no run archives in it")
    if not dirs:
        raise click.UsageError("give RUN_DIR..., --all, or --logs FILE...")
    for d in paths:
        if not layout.is_run_dir(Path(d)):
            raise ArchiveError(f"{d}: not a run directory (no manifest.json)")
    spark = job.build_session(master)
    out = job.summarize_runs(spark, dirs, window_s, results_dir=results_dir if all_runs else None)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "format_version": 2,
                    "runs": [
                        {
                            **r.summary,
                            "run_dir": r.run_dir,
                            "problems": [list(p) for p in r.problems],
                        }
                        for r in out.runs
                    ],
                    "skipped": out.skipped,
                },
                indent=1,
            )
        )
        if out.skipped:
            sys.exit(2)
        return
    echo_table(
        (
            "run",
            "send msgs/s",
            "recv msgs/s",
            "send p95 ms",
            "proc p95 ms",
            "lost",
            "undrained",
            "dup",
            "reord",
            "problems",
        ),
        [
            (
                r.run_id,
                r.summary["throughput"]["send_msgs_per_s"],
                r.summary["throughput"]["receive_msgs_per_s"],
                _ms(r.summary["latency_us"]["send_call_us"]["p95"]),
                _ms(r.summary["latency_us"]["processing_us"]["p95"]),
                _known(r.summary["delivery"]["lost"]),
                _known(r.summary["delivery"]["undrained"]),
                _known(r.summary["delivery"]["duplicated"]),
                _known(r.summary["delivery"]["reordered"]),
                len(r.problems),
            )
            for r in out.runs
        ],
    )
    for r in out.runs:
        _echo_unknown(r.run_id, r.summary)
    _echo_problems([p for r in out.runs for p in r.problems])
    for s in out.skipped:
        click.echo(f"skipped {s}", err=True)
    if out.skipped:  # the others are summarized; the skipped ones are the user's to fix
        sys.exit(2)


def _known(v: Any) -> Any:
    """A figure, or "unknown" where the summary could not compute it (see its reasons)."""
    from mqlab.report.unknown import UNKNOWN

    return UNKNOWN if v is None else v


def _echo_unknown(run_id: str, summary: dict[str, Any]) -> None:
    """The summary's reasons for its unknown delivery figures, one line per reason."""
    from mqlab.analysis.schema import DELIVERY
    from mqlab.report.unknown import reasons

    why = reasons(summary)
    by_reason: dict[str, list[str]] = {}
    for fig in DELIVERY:
        if fig in why:
            by_reason.setdefault(why[fig], []).append(fig)
    for text, figs in by_reason.items():
        click.echo(f"{run_id}: {', '.join(figs)} unknown: {text}")


def _ms(us: float | int | None) -> float | None:
    return None if us is None else us / 1000


def _echo_problems(problems: Sequence[tuple[str, int | None, str]], limit: int = 20) -> None:
    if not problems:
        return
    click.echo(f"{len(problems)} input problems (skipped, counted):", err=True)
    for path, line, text in problems[:limit]:
        click.echo(f"  {path}{f':{line}' if line else ''}: {text}", err=True)
    if len(problems) > limit:
        click.echo(f"  ... and {len(problems) - limit} more", err=True)


def _echo_logs(
    rows: list[dict[str, Any]], problems: list[tuple[str, int | None, str]], as_json: bool
) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {"format_version": 1, "logs": rows, "problems": [list(p) for p in problems]},
                indent=1,
            )
        )
        return
    echo_table(
        ("file", "tag", "count", "p50", "p90", "p99", "p99.9", "max", "start", "end", "span s"),
        [
            (
                r["file"],
                r["tag"] or "",
                r["count"],
                r["p50"],
                r["p90"],
                r["p99"],
                r["p99_9"],
                r["max"],
                _time(r["start_ms"]),
                _time(r["end_ms"]),
                r["span_s"],
            )
            for r in rows
        ],
    )
    click.echo("(values in the log's unit; mqlab logs: µs)")
    _echo_problems(problems)


@click.command()
@click.argument("sql")
@click.option("--csv", "fmt", flag_value="csv", help="CSV output")
@click.option("--json", "fmt", flag_value="json", help="JSON output")
@results_option
@_user_errors
def query(sql: str, fmt: str | None, results_dir: str) -> None:
    """Run DuckDB SQL over every run archive under --results, at any depth, read in place
    (views: runs, windows, timeline, latency, delivery, problems, faults; archives: every
    run found, summarized or not)."""
    from mqlab.report import query as q

    columns, rows, found = q.run_query_found(results_dir, sql)
    missing = found.not_summarized
    if missing:
        names = [p.name for p in missing]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        click.echo(
            f"note: {len(missing)} of the {len(found.runs)} run(s) under {results_dir} have "
            f"no summary yet, so no rows (the view archives lists them): {shown} "
            f"(mqlab summarize RUN_DIR, or --all, adds them)",
            err=True,
        )
    if fmt == "csv":
        click.echo(q.to_csv(columns, rows), nl=False)
    elif fmt == "json":
        click.echo(q.to_json(columns, rows))
    else:
        echo_table(columns, rows)


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--sweep-out",
    type=click.Path(file_okay=False),
    help="where the sweep report over several runs goes (default RESULTS/reports/sweep-FIRST_RUN)",
)
@results_option
@_user_errors
def report(runs: tuple[str, ...], sweep_out: str | None, results_dir: str) -> None:
    """Write report.md and PNG plots into each run directory (and a sweep report)."""
    from mqlab.report import compare as cmp
    from mqlab.report import markdown as rep
    from mqlab.report import sweep

    dirs = [cmp.resolve_run(r, results_dir)["run_dir"] for r in runs]
    for d in dirs:
        click.echo(f"wrote {rep.report_run(d)}")
    if len(dirs) > 1:
        out = sweep_out or str(Path(results_dir) / "reports" / f"sweep-{Path(dirs[0]).name}")
        click.echo(f"wrote {sweep.report_sweep(dirs, out)}")


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--reference",
    "ref",
    help="compare RUN... with a published data set's rows (mqperf-2021, ...)",
)
@results_option
@_user_errors
def compare(runs: tuple[str, ...], ref: str | None, results_dir: str) -> None:
    """Compare BASELINE CONTENDER from stored summaries, or RUN... with --reference."""
    from mqlab.report import compare as cmp
    from mqlab.report import unknown

    resolved = [cmp.resolve_run(r, results_dir) for r in runs]
    if ref:
        from mqlab.published import sets as published

        dataset = published.get(ref)
        click.echo(f"{ref}: {dataset.source}")
        for block in dataset.blocks(resolved, None):
            click.echo(f"\n{block.title}")
            echo_table(block.headers, block.rows)
            for note in block.notes:
                click.echo(f"note: {note}")
        return
    if len(resolved) != 2:
        raise click.UsageError("give BASELINE and CONTENDER (or --reference NAME RUN...)")
    base, cont = resolved
    bt, ct = cmp.trials_of(base, results_dir), cmp.trials_of(cont, results_dir)
    from mqlab.analysis.saturation import marks

    for side, run, trials in (("baseline: ", base, bt), ("contender:", cont, ct)):
        marked = marks(run, run.get("stand_in"))
        note = f"; marked {', '.join(marked)}: not the broker's figures" if marked else ""
        where = f" in {run['folder']}" if run.get("folder") not in (None, ".") else ""
        click.echo(f"{side} {run['run_id']}{where} ({len(trials)} trials{note})")
    lines = cmp.compare_runs(base, cont, bt, ct)
    echo_table(
        ("figure", "baseline", "contender", "ratio", "vs noise"),
        [
            (
                ln.label,
                _known(ln.baseline),
                _known(ln.contender),
                None if ln.ratio is None else f"{ln.ratio:.3f}",
                ln.verdict,
            )
            for ln in lines
        ],
    )
    for ln in lines:
        for side, run in (("baseline", base), ("contender", cont)):
            why = unknown.why(run, ln.field)
            if why is not None:
                click.echo(f"{side} {ln.label} unknown: {why}")


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=".mqlab/site",
    show_default=True,
    help="folder to write the site into (rewritten on each run)",
)
@results_option
@_user_errors
def site(out_dir: str, results_dir: str) -> None:
    """Write the runs under --results (at any depth) as a static website: an index of the
    experiments and runs, a page per experiment (its sweep, and the published figures
    beside its runs), a broker overview, the durability matrix, a page per run (plots,
    delivery, scenario, manifest), and a comparison page with the mqperf 2021 published
    figures. Open the index.html it prints from disk or serve the folder."""
    from mqlab.report.site import write_site

    result = write_site(results_dir, out_dir)
    for line in result.warnings:
        click.echo(f"warning: {line}", err=True)
    click.echo(
        f"site of {result.runs} run(s) in {result.experiments} experiment(s) written; open:",
        err=True,
    )
    click.echo(str(result.index.resolve()))


DATA_COMMANDS: list[click.Command] = [summarize, query, report, compare, site]
