"""The docs stay readable: README table cells and benchmarks/RESULTS.md stay short, and relative links resolve."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_CELL_CHARS = 300
MAX_RESULTS_LINES = 800

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_table_cells_are_at_most_300_characters() -> None:
    text = FENCE.sub("", (ROOT / "README.md").read_text(encoding="utf-8"))
    long = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            long += [f"{len(c.strip())}: {c.strip()[:60]}…" for c in cells if len(c.strip()) > MAX_CELL_CHARS]
    assert not long, f"README table cells over {MAX_CELL_CHARS} characters: {long}"


def test_results_page_is_at_most_800_lines() -> None:
    lines = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_RESULTS_LINES, f"benchmarks/RESULTS.md has {len(lines)} lines"


def test_relative_links_in_readme_and_docs_point_to_existing_files() -> None:
    broken = []
    for md in _markdown_files():
        text = INLINE_CODE.sub("", FENCE.sub("", md.read_text(encoding="utf-8")))
        for target in LINK.findall(text):
            path = target.split("#", 1)[0]
            if not path or SCHEME.match(target):
                continue
            if not (md.parent / path).exists():
                broken.append(f"{md.relative_to(ROOT)}: {target}")
    assert not broken, f"relative links to missing files: {broken}"
