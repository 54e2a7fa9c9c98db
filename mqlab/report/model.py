"""The report's model: a section of paragraphs and tables, rendered as Markdown here
(``report.md``) and as HTML by the site (:func:`mqlab.report.site.html.section_html`), so
the site reads the report's content, never its Markdown."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Paragraph:
    text: str
    lead: str | None = None  # a bold first word or two ("Problem:")


@dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    align: str = ""  # one character per column: l or r (default l)


Block = Paragraph | Table


@dataclass(frozen=True)
class Section:
    title: str
    blocks: Sequence[Block]


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], align: str = ""
) -> list[str]:
    """A markdown table; ``align`` gives one character per column: l or r (default l)."""
    marks = ["---:" if a == "r" else "---" for a in align.ljust(len(header), "l")]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def section_markdown(section: Section) -> list[str]:
    """A section as Markdown lines: its heading, then its blocks a blank line apart."""
    lines = [f"## {section.title}", ""]
    for i, block in enumerate(section.blocks):
        if i:
            lines.append("")
        if isinstance(block, Table):
            lines += markdown_table(block.header, block.rows, block.align)
        else:
            lines.append(f"**{block.lead}** {block.text}" if block.lead else block.text)
    return lines
