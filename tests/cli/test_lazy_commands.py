"""The command line imports only the command modules of the command it runs (cli/app.py): the table that says which
modules register a command is complete, and serving imports none of the planner's or the load generator's stack."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import typer

from cascadeserve.cli import app
from cascadeserve.cli.app import COMMAND_MODULES, COMMANDS


def _module(callback: object) -> str:
    return str(getattr(callback, "__module__", "")).removeprefix("cascadeserve.cli.")


def test_the_table_names_every_command_and_every_module_that_registers_one() -> None:
    root = typer.main.get_command(app)
    assert set(COMMANDS) == set(getattr(root, "commands", {}))
    for c in app.registered_commands:
        assert c.name is not None and _module(c.callback) in COMMANDS[c.name], c.name
    for g in app.registered_groups:
        assert g.name is not None and g.typer_instance is not None
        assert {_module(c.callback) for c in g.typer_instance.registered_commands} <= set(COMMANDS[g.name]), g.name
    assert {m for ms in COMMANDS.values() for m in ms} == set(COMMAND_MODULES)


def test_serve_loads_neither_scipy_nor_the_load_generator() -> None:
    # a fresh interpreter: this test process has imported everything already
    code = textwrap.dedent("""
        import sys
        from cascadeserve.cli.app import load_commands
        load_commands(["serve", "--plan", "p.json"])
        print(sorted(m for m in ("scipy", "aiohttp", "cascadeserve.planner", "cascadeserve.eval.loadgen")
                     if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stderr
