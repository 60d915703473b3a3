"""The ``cascadeserve`` command line (typer + rich): one subcommand group per stage.

``profile`` (show, frontier), ``plan`` (fixed, ...), ``simulate``; later stages add ``serve``, ``bench``,
``eval``, ``compare`` and ``demo``. Each group lives in its own module. User errors
(:class:`~cascadeserve.errors.CascadeServeError`) print one line and exit with code 2, without a traceback.

Importing this package imports no command module: :func:`main` imports those of the command it runs (see
:mod:`cascadeserve.cli.app`), and reading ``app`` here imports them all.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from cascadeserve.cli.app import run

# Importing the submodule bound its name, `app`, here; in this package `app` is the Typer app (as it always was),
# which __getattr__ returns with every command registered.
del app  # noqa: F821  (the name is the submodule here, see above)

if TYPE_CHECKING:  # bound by __getattr__ below, once every command is registered
    from cascadeserve.cli.app import app

__all__ = ["app", "main", "run"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from cascadeserve.cli.app import load_commands

        return load_commands(None)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    sys.exit(run())
