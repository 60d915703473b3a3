"""The root typer app, the shared error handling and output helpers."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import typer
from rich.console import Console

from cascadeserve.errors import CascadeServeError

__all__ = ["app", "console", "err_console", "print_json", "register", "run"]

app = typer.Typer(
    name="cascadeserve",
    help="Serve predictions from model cascades: profile a model family, plan gears, simulate, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

_registered = False

# Click's base exception, wherever this typer takes click from: recent typer vendors it as ``typer._click`` (and does
# not depend on ``click``), older typer re-exports ``click``'s own classes. ``typer.BadParameter`` derives from it.
_CLICK_ERRORS: tuple[type[Exception], ...] = tuple(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException" and issubclass(c, Exception)
)


def register() -> None:
    """Import the command modules (each adds its group to ``app``)."""
    global _registered
    if _registered:
        return
    from cascadeserve.cli import bench, compare, demo, eval, fidelity, plan, profile, serve, simulate  # noqa: F401  (modules register their commands)

    _registered = True


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=float) + "\n")
    sys.stdout.flush()


_ARGV: list[str] = []


def invocation() -> str:
    """The command line this run was given (``run``'s argv, or the process's), for reports that must be rerunnable."""
    return shlex.join(["cascadeserve", *_ARGV])


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit code 2."""
    register()
    _ARGV[:] = list(argv) if argv is not None else sys.argv[1:]
    try:
        app(args=argv, standalone_mode=False)
    except CascadeServeError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        return e.exit_code
    except KeyError as e:  # unknown model names and the like carry a full sentence
        err_console.print(f"[bold red]error:[/] {e.args[0] if e.args else e}", highlight=False, soft_wrap=True)
        return 2
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except _CLICK_ERRORS as e:  # usage errors: unknown option, bad value, missing argument
        e.show()  # type: ignore[attr-defined]
        return int(e.exit_code)  # type: ignore[attr-defined]
    return 0
