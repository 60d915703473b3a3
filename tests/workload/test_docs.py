"""The workload page and the README stay true: their workload files validate, and every ``cascadeserve`` command
line they show names a command and options that exist (old spellings excepted, where the page lists them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from cascadeserve.cli import app
from cascadeserve.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "workloads.md", ROOT / "README.md"]


def _blocks(page: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(), flags=re.S)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_workload_files_shown_validate(page: Path, tmp_path: Path) -> None:
    shown = [b for b in _blocks(page, "yaml") if "slo:" in b]
    assert shown
    for text in shown:
        (tmp_path / "cascadeserve.yaml").write_text(text)
        assert load_workload(tmp_path).spec.slo is not None


def _leaf(root: Any, words: list[str]) -> tuple[Any, list[str]]:
    cmd = root
    while words and hasattr(cmd, "commands") and words[0] in cmd.commands:
        cmd, words = cmd.commands[words[0]], words[1:]
    return cmd, words


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_command_lines_shown_use_options_that_exist(page: Path) -> None:
    root = typer.main.get_command(app)
    lines = [ln.split("#", 1)[0] for b in _blocks(page, "bash") for ln in b.replace("\\\n", " ").splitlines()]
    checked = 0
    for line in lines:
        words = shlex.split(line)
        if not words or not words[0].endswith("cascadeserve"):
            continue
        cmd, rest = _leaf(root, words[1:])
        assert cmd is not root, line
        opts = {o for p in cmd.params for o in [*p.opts, *p.secondary_opts]}
        for w in rest:
            if w.startswith("--"):
                assert w.split("=", 1)[0] in opts, f"{line}: {w}"
        checked += 1
    assert checked >= 3
