"""The `mqlab run` table read through a pipe or a file: nothing of it is cut."""

from __future__ import annotations

import io

from rich.console import Console

from mqlab import cli


def _row(run: str, **figures: str) -> dict[str, str]:
    row = {key: "1" for key, _title in (*cli.MQPERF_COLUMNS, *cli.COST_COLUMNS)}
    row.update(run=run, status="complete", send="12,345", receive="12,340", **figures)
    return row


def _piped(rows: list[dict[str, str]]) -> str:
    """What `mqlab run` prints when stdout is a pipe: a console that is no terminal, as
    wide as the CLI makes it then."""
    console = Console(file=io.StringIO(), width=cli.PIPE_WIDTH)
    assert not console.is_terminal
    cli.print_table(console, cli.mqperf_table(rows))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text, text
    return text


def test_the_quickstart_row_keeps_its_run_name_in_a_pipe() -> None:
    text = _piped([_row("nats-r3_5t-1s-2r")])
    (line,) = [ln for ln in text.splitlines() if "nats-r3" in ln]
    assert "nats-r3_5t-1s-2r" in line and "12,345" in line and "complete" in line


def test_a_long_sweep_label_with_every_column_is_whole_in_a_pipe() -> None:
    label = "kafka-short_kafka-standin_sweep-message_bytes-65536_2t-1s-1r"
    rows = [
        _row(label, marks="client-bound, receivers behind", cost="0.0123", cost_per_m="1.2345"),
        _row("nats-r3_5t-1s-2r", lost="unknown"),
    ]
    text = _piped(rows)
    for r in rows:
        (line,) = [ln for ln in text.splitlines() if f" {r['run']} " in ln]
        for key, _title in cli.mqperf_columns(rows):
            assert r[key] in line, (key, line)
    for _key, title in cli.mqperf_columns(rows):
        assert title in text, title
