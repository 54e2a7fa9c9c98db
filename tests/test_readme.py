"""README.md stays a short entry point, and every path it and its docs pages name exists.

Checked against the repository itself: the files `git ls-files` lists (tracked, plus
untracked files that are not ignored), so an ignored or generated file never counts.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = "README.md"
MAX_README_LINES = 200
# every page under docs/ and the contributing guide: links and named paths must exist
PAGES = tuple(sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))) + (
    "CONTRIBUTING.md",
)
# The README's two commands, each on a line of its own in a ```sh block.
COMMANDS = ("scripts/mqlab run scenarios/quickstart.toml", "scripts/test")
# A code span whose first word starts with one of these names a repository path.
PATH_PREFIXES = (
    "scenarios/",
    "scripts/",
    "docs/",
    "results/",
    "mqlab/",
    "tests/",
    "images/",
    "terraform/",
    "bench/",
    "spark/",
    "nix/",
)
# Paths the docs name as what a command writes, not as files in the repository.
OUTPUTS = frozenset({"results/reports/sweep-FIRST_RUN/"})

FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`([^`]+)`")  # may span a line break, as in CommonMark
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
PLACEHOLDER = re.compile(r"<[^<>/]+>|\b[A-Z][A-Z0-9_]+\b")
BRACES = re.compile(r"\{([^{}]*)\}")


@cache
def repo_files() -> frozenset[str]:
    """Tracked and untracked-but-not-ignored files that exist on disk."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return frozenset(p for p in out.split("\0") if p and (ROOT / p).is_file())


@cache
def repo_dirs() -> frozenset[str]:
    dirs = set()
    for p in repo_files():
        parts = p.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return frozenset(dirs)


def split_fences(text: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """The text outside fenced code blocks, and each block as (info string, lines)."""
    prose: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    fence: str | None = None
    for line in text.splitlines():
        m = FENCE.match(line.strip())
        if fence is None and m:
            fence = m.group(1)
            blocks.append((m.group(2).strip(), []))
        elif fence is not None and line.strip().startswith(fence) and len(set(line.strip())) == 1:
            fence = None
        elif fence is not None:
            blocks[-1][1].append(line)
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def exists(path: str) -> bool:
    """A repository file, or a directory holding one."""
    path = path.rstrip("/")
    return path in repo_files() or path in repo_dirs()


def matches(pattern: str) -> bool:
    """A path with placeholders (<x>, NAME, {a,b}, *): every alternative names something."""
    m = BRACES.search(pattern)
    if m:
        head, tail = pattern[: m.start()], pattern[m.end() :]
        return all(matches(head + alt + tail) for alt in m.group(1).split(","))
    glob = PLACEHOLDER.sub("*", pattern)
    if glob == pattern and "*" not in glob:
        return exists(pattern)
    candidates = repo_dirs() if glob.endswith("/") else repo_files()
    return any(fnmatch.fnmatchcase(c, glob.rstrip("/")) for c in candidates)


def broken_links(page: str, text: str) -> list[str]:
    """Relative markdown link targets of a page (resolved from its folder) that do not exist."""
    prose, _ = split_fences(text)
    broken = []
    for target in LINK.findall(prose):
        if SCHEME.match(target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page), path))
        if resolved.startswith("../") or not exists(resolved):
            broken.append(target)
    return broken


def broken_code_paths(text: str) -> list[str]:
    """Repository paths named in code spans (from the repository root) that do not exist."""
    prose, _ = split_fences(text)
    broken = []
    for span in CODE_SPAN.findall(prose):
        words = span.split()
        path = words[0] if words else ""
        if path.startswith(PATH_PREFIXES) and path not in OUTPUTS and not matches(path):
            broken.append(path)
    return broken


def read(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


def test_readme_is_short() -> None:
    n = len(read(README).splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; move detail into docs/"


def test_readme_keeps_the_two_commands_verbatim() -> None:
    _, blocks = split_fences(read(README))
    sh_lines = {
        line.split(" #", 1)[0].strip() for info, lines in blocks if info == "sh" for line in lines
    }
    for command in COMMANDS:
        assert command in sh_lines, f"README.md: no ```sh line `{command}`"


@pytest.mark.parametrize("page", (README, *PAGES))
def test_links_and_paths_exist(page: str) -> None:
    text = read(page)
    assert broken_links(page, text) == [], f"{page}: links to missing files"
    assert broken_code_paths(text) == [], f"{page}: names missing repository paths"


def test_readme_leads_to_every_docs_page() -> None:
    linked = {
        posixpath.normpath(t.split("#", 1)[0])
        for t in LINK.findall(split_fences(read(README))[0])
        if not SCHEME.match(t)
    }
    pages = {p for p in repo_files() if p.startswith("docs/") and p.endswith(".md")}
    assert pages >= {p for p in PAGES if p.startswith("docs/")}
    assert pages | {"CONTRIBUTING.md"} <= linked


def test_the_checks_can_fail() -> None:
    """The checkers see a missing link target, a missing code path and a missing placeholder."""
    assert broken_links("docs/x.md", "[a](../nope.md) [b](fleet.md) [c](https://x.y/z)") == [
        "../nope.md"
    ]
    assert broken_links("README.md", "![p](docs/fleet.md#clocks) [q](docs/)") == []
    assert broken_code_paths("`scripts/nope --help` `scripts/test` `mqlab run`") == ["scripts/nope"]
    spans = "`scenarios/<broker>-short.toml` `scenarios/{redis,nope}-sweep.toml`"
    assert broken_code_paths(spans) == ["scenarios/{redis,nope}-sweep.toml"]
    assert broken_code_paths("```sh\n`scripts/nope`\n```\n") == []
