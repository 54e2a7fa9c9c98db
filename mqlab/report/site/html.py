"""Small HTML building blocks of the site. Every text from an archive goes through
:func:`esc`; attributes are quoted; links are relative."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from importlib import metadata
from typing import Any

from mqlab.report import unknown
from mqlab.report.model import (
    Block,
    Bullets,
    Cell,
    Code,
    Facts,
    Link,
    Plot,
    Section,
    Strong,
    Table,
    Text,
)

NOT_SUMMARIZED = "–"  # as `mqlab ls` shows a figure of a run without a summary
NAV = (
    ("Runs", "index.html"),
    ("Brokers", "brokers.html"),
    ("Durability", "durability.html"),
    ("Compare", "compare.html"),
)


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def breakable(text: str) -> str:
    """``text`` escaped, with line-break opportunities after ``_`` (long run ids)."""
    return esc(text).replace("_", "_<wbr>")


def attrs(**kw: Any) -> str:
    """` key="value"` for each value that is not None (``cls`` is ``class``, ``_`` in a
    name is ``-``)."""
    out = []
    for k, v in kw.items():
        if v is None:
            continue
        name = "class" if k == "cls" else k.replace("_", "-")
        out.append(f' {name}="{esc(v)}"')
    return "".join(out)


def td(
    text: str,
    sort: float | int | str | None = None,
    title: str | None = None,
    cls: str | None = None,
    raw: bool = False,
    **kw: Any,
) -> str:
    """A cell; ``sort`` is the value the table sorts by ("" sorts last), ``raw`` when
    ``text`` is HTML already."""
    body = text if raw else esc(text)
    return f"<td{attrs(data_sort=sort, title=title, cls=cls, **kw)}>{body}</td>"


def figure(
    value: float | int | None,
    spec: str = ",",
    why: str | None = None,
    scale: float = 1.0,
    **kw: Any,
) -> str:
    """A figure's cell: formatted as the report does, or "unknown" with the summary's
    reason (shown on hover), never 0."""
    if value is None:
        return td(
            unknown.UNKNOWN,
            sort="",
            title=f"unknown: {why or 'not in the summary'}",
            cls="unknown",
            **kw,
        )
    shown = value * scale if scale != 1.0 else value
    return td(unknown.show(shown, spec), sort=value, cls="num", **kw)


def not_summarized(why: str, **kw: Any) -> str:
    return td(NOT_SUMMARIZED, sort="", title=why, cls="unknown", **kw)


def table(
    header: Sequence[str | tuple[str, str]],
    rows: Iterable[str],
    table_id: str | None = None,
    sortable: bool = True,
    cls: str | None = None,
    caption: str | None = None,
) -> str:
    """A table; ``header`` items are a title or (title, HTML attributes); ``rows`` are
    ``<tr>`` HTML."""
    ths = []
    for h in header:
        title, extra = (h, "") if isinstance(h, str) else h
        ths.append(f'<th scope="col"{extra}>{breakable(title)}</th>')
    classes = " ".join(c for c in ("sortable" if sortable else "", cls or "") if c) or None
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f"<table{attrs(id=table_id, cls=classes)}>{cap}\n<thead><tr>{''.join(ths)}</tr></thead>"
        f"\n<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>"
    )


def tr(cells: Iterable[str], **kw: Any) -> str:
    return f"<tr{attrs(**kw)}>{''.join(cells)}</tr>"


def pre(text: str, cls: str | None = None) -> str:
    return f"<pre{attrs(cls=cls)}>{esc(text)}</pre>"


def filter_box(table_id: str, placeholder: str, what: str) -> str:
    """A text box that hides the rows of ``table_id`` without every word typed, and the
    count of rows shown."""
    return (
        f'<p class="filter"><label>Filter {esc(what)}: <input type="search"'
        f'{attrs(data_filter=table_id, placeholder=placeholder)} autocomplete="off"></label>'
        f' <span class="count"{attrs(data_count_for=table_id)}></span></p>'
    )


def _version() -> str:
    try:
        return metadata.version("mqlab")
    except metadata.PackageNotFoundError:
        return "unknown"


def page(title: str, body: str, root: str = "", current: str = "") -> str:
    """A whole page; ``root`` is the relative path to the site's root ("" or "../../")."""
    nav = "".join(
        f'<a href="{root}{href}"{attrs(aria_current="page" if name == current else None)}>'
        f"{esc(name)}</a>"
        for name, href in NAV
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="mqlab {esc(_version())}">
<title>{esc(title)} · mqlab</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{root}site.css">
<script src="{root}site.js" defer></script>
</head>
<body>
<header><span class="brand">mqlab results</span><nav>{nav}</nav></header>
<main>
{body}
</main>
<footer>Written by <code>mqlab site</code> from the run archives; figures as
<code>mqlab ls</code>, <code>mqlab report</code> and <code>mqlab compare</code> show them.
</footer>
</body>
</html>
"""


def inline_html(text: Text) -> str:
    if isinstance(text, str):
        return esc(text)
    out = []
    for part in text:
        if isinstance(part, Code):
            out.append(f"<code>{esc(part.text)}</code>")
        elif isinstance(part, Link):
            out.append(f'<a href="{esc(part.href)}">{esc(part.label)}</a>')
        elif isinstance(part, Strong):
            out.append(f"<strong>{esc(part.text)}</strong>")
        else:
            out.append(esc(part))
    return "".join(out)


def cell_html(cell: str | Cell, right: bool) -> str:
    """A model cell: "unknown" with the summary's reason on hover (sorting last), a figure
    aligned right and sorting by its value, or text."""
    if isinstance(cell, str):
        return td(cell, cls="num" if right else None)
    if cell.why is not None and cell.text == unknown.UNKNOWN:
        return td(cell.text, sort="", title=f"unknown: {cell.why}", cls="unknown")
    return td(cell.text, sort=cell.sort, title=cell.hint, cls="num" if right else None)


def block_html(block: Block) -> str:
    if isinstance(block, Table):
        align = block.align.ljust(len(block.header), "l")
        marks = [*block.marks, *[None] * (len(block.rows) - len(block.marks))]
        rows = [
            tr((cell_html(c, align[i] == "r") for i, c in enumerate(r)), cls=mark)
            for r, mark in zip(block.rows, marks, strict=True)
        ]
        return table(block.header, rows, table_id=block.name, sortable=False, caption=block.caption)
    if isinstance(block, Facts):
        dl = "".join(f"<dt>{esc(k)}</dt><dd>{inline_html(v)}</dd>" for k, v in block.items)
        return f'<dl class="facts">{dl}</dl>'
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Plot):
        src = esc(block.src)
        return (
            f'<figure><a href="{src}"><img src="{src}" alt="{esc(block.alt)}" '
            'class="plot"></a></figure>'
        )
    lead = f"<strong>{esc(block.lead)}</strong> " if block.lead else ""
    return f"<p{attrs(cls='note' if block.note else None)}>{lead}{inline_html(block.text)}</p>"


def section_html(section: Section) -> str:
    """A report section (:mod:`mqlab.report.model`) as HTML: its heading, then its
    paragraphs, lists, tables (not sortable) and plots, in order."""
    return f"<h2>{esc(section.title)}</h2>" + "".join(block_html(b) for b in section.blocks)
