"""Read the site's HTML back with the standard library's parser: the links of a page and
the rows of its tables (cell text and attributes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path


@dataclass
class Cell:
    text: str
    attrs: dict[str, str]


@dataclass
class Row:
    attrs: dict[str, str]
    cells: list[Cell] = field(default_factory=list)


@dataclass
class Table:
    attrs: dict[str, str]
    header: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tables: list[Table] = []
        self.ids: list[str] = []
        self._stack: list[Table] = []
        self._cell: Cell | None = None
        self._in_head = False
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.append(a["id"])
        for name in ("href", "src"):
            if name in a:
                self.links.append((tag, name, a[name]))
        if tag == "table":
            self._stack.append(Table(a))
        elif tag == "tr" and self._stack:
            self._stack[-1].rows.append(Row(a))
        elif tag in ("td", "th") and self._stack:
            self._cell = Cell("", a)
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._stack:
            self._cell.text = " ".join("".join(self._text).split())
            self._stack[-1].rows[-1].cells.append(self._cell)
            self._cell = None
        elif tag == "table" and self._stack:
            table = self._stack.pop()
            if table.rows and all("scope" in c.attrs for c in table.rows[0].cells):
                table.header = [c.text for c in table.rows[0].cells]
                table.rows = table.rows[1:]
            self.tables.append(table)

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._text.append(data)


@dataclass
class Page:
    path: Path
    text: str
    links: list[tuple[str, str, str]]
    tables: list[Table]
    ids: list[str]

    def table(self, table_id: str) -> Table:
        found = [t for t in self.tables if t.attrs.get("id") == table_id]
        assert len(found) == 1, f"{self.path}: {len(found)} tables with id {table_id!r}"
        return found[0]


def read_page(path: Path) -> Page:
    text = path.read_text(encoding="utf-8")
    p = _Page()
    p.feed(text)
    p.close()
    return Page(path, text, p.links, p.tables, p.ids)


def column(table: Table, row: Row, name: str) -> Cell:
    """The cell of ``row`` under the heading ``name``."""
    return row.cells[table.header.index(name)]
