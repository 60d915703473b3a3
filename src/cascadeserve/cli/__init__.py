"""The ``cascadeserve`` command line (typer + rich): one subcommand group per stage.

``profile`` (show, frontier), ``plan`` (fixed, ...), ``simulate``; later stages add ``serve``, ``bench``,
``eval``, ``compare`` and ``demo``. Each group lives in its own module. User errors
(:class:`~cascadeserve.errors.CascadeServeError`) print one line and exit with code 2, without a traceback.
"""

from __future__ import annotations

import sys

from cascadeserve.cli.app import app, run

__all__ = ["app", "main", "run"]


def main() -> None:
    sys.exit(run())
