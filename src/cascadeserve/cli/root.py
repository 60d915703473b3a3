"""The root typer app and the output helpers every command module shares.

Command modules (``cli/plan.py``, ``cli/serve.py``, ...) import :data:`app` from here and add their commands to it;
:mod:`cascadeserve.cli.app` imports them all and runs the app. This module imports no command module, so the
dependencies point one way: ``app`` → command modules → ``root``.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

import typer
from rich.console import Console, ConsoleDimensions

__all__ = ["app", "console", "err_console", "invocation", "print_json", "set_invocation"]

app = typer.Typer(
    name="cascadeserve",
    help="Serve predictions from model cascades: `init` and `up` a workload file, or profile a model family, plan "
    "gears, simulate and serve step by step.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Where stdout is not a terminal (a file, a pipe, CI logs) rich assumes 80 columns and breaks each table row over
# several lines; there the console is this wide instead, so that a row, or a message, stays one line.
UNWRAPPED_WIDTH = 10_000


class _Console(Console):
    """rich's console, as wide as :data:`UNWRAPPED_WIDTH` where its file is not a terminal, whatever ``COLUMNS``
    says (test runners' workers and some CI runners set it to 80); a terminal keeps its own width."""

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        return dims if self.is_terminal else ConsoleDimensions(UNWRAPPED_WIDTH, dims.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = _Console()
err_console = Console(stderr=True)

_ARGV: list[str] = []


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=float) + "\n")
    sys.stdout.flush()


def set_invocation(argv: Sequence[str]) -> None:
    """Remember the arguments this run was given (``cli.app.run`` calls it), for :func:`invocation`."""
    _ARGV[:] = list(argv)


def invocation() -> str:
    """The command line this run was given (``run``'s argv, or the process's), for reports that must be rerunnable."""
    return shlex.join(["cascadeserve", *_ARGV])
