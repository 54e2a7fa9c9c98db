"""The report's model: sections of paragraphs, lists, tables and plots, rendered as
Markdown here (``report.md``) and as HTML by the site
(:func:`mqlab.report.site.html.section_html`), so the site reads the report's content,
never its Markdown.

Text is a string or a sequence of inline parts (a plain string, :class:`Code`,
:class:`Link`, :class:`Strong`); a table cell is a string or a :class:`Cell` that also
carries the value it sorts by and, when it is "unknown", the summary's reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Link:
    label: str
    href: str


@dataclass(frozen=True)
class Strong:
    text: str


Inline = str | Code | Link | Strong
Text = str | Sequence[Inline]


@dataclass(frozen=True)
class Paragraph:
    text: Text
    lead: str | None = None  # a bold first word or two ("Problem:")
    note: bool = False  # a caveat (the site sets it apart)


@dataclass(frozen=True)
class Bullets:
    items: Sequence[Text]


@dataclass(frozen=True)
class Cell:
    """A table cell: its text, the value it sorts by, why it is unknown (the summary's
    reason; shown on hover) or a hint."""

    text: str
    sort: float | int | str | None = None
    why: str | None = None
    hint: str | None = None


@dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str | Cell]]
    align: str = ""  # one character per column: l or r (default l)
    name: str | None = None  # the site's table id
    caption: str | None = None  # a title above the table
    marks: Sequence[str | None] = ()  # a word per row the site marks it with (its class)


@dataclass(frozen=True)
class Plot:
    """A PNG plot of the run (a file beside the report) and its description."""

    src: str
    alt: str


@dataclass(frozen=True)
class Facts:
    """A run's facts: (label, text) pairs; a definition list on the site, a list in
    Markdown whose items say what they are in their text (the label is the site's)."""

    items: Sequence[tuple[str, Text]]


Block = Paragraph | Bullets | Table | Plot | Facts


@dataclass(frozen=True)
class Section:
    title: str
    blocks: Sequence[Block]


def cell_text(cell: str | Cell) -> str:
    return cell if isinstance(cell, str) else cell.text


def inline_markdown(text: Text) -> str:
    if isinstance(text, str):
        return text
    out = []
    for part in text:
        if isinstance(part, Code):
            out.append(f"`{part.text}`")
        elif isinstance(part, Link):
            out.append(f"[{part.label}]({part.href})")
        elif isinstance(part, Strong):
            out.append(f"**{part.text}**")
        else:
            out.append(part)
    return "".join(out)


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[str | Cell]], align: str = ""
) -> list[str]:
    """A markdown table; ``align`` gives one character per column: l or r (default l)."""
    marks = ["---:" if a == "r" else "---" for a in align.ljust(len(header), "l")]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    out += ["| " + " | ".join(cell_text(c) for c in r) + " |" for r in rows]
    return out


def block_markdown(block: Block) -> list[str]:
    if isinstance(block, Table):
        caption = [f"**{block.caption}**", ""] if block.caption else []
        return caption + markdown_table(block.header, block.rows, block.align)
    if isinstance(block, Bullets):
        return [f"- {inline_markdown(item)}" for item in block.items]
    if isinstance(block, Facts):
        return [f"- {inline_markdown(text)}" for _, text in block.items]
    if isinstance(block, Plot):
        return [f"![{block.alt}]({block.src})"]
    text = inline_markdown(block.text)
    return [f"**{block.lead}** {text}" if block.lead else text]


def section_markdown(section: Section) -> list[str]:
    """A section as Markdown lines: its heading, then its blocks a blank line apart."""
    lines = [f"## {section.title}", ""]
    for i, block in enumerate(section.blocks):
        if i:
            lines.append("")
        lines += block_markdown(block)
    return lines
