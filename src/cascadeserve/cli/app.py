"""The assembled command line: every command module registered on the root app, and :func:`run` with the shared
error handling.

The root app and the output helpers live in :mod:`cascadeserve.cli.root`, which the command modules import; this
module imports the command modules (each adds its group or command to the app when imported), so there is no
import cycle. ``app``, ``console``, ``err_console`` and ``print_json`` are re-exported from ``root``.
"""

from __future__ import annotations

import sys

import typer

# Importing a command module registers its commands, and `--help` lists them in that order (commands first,
# then groups): keep this order, not the alphabetical one.
# isort: off
from cascadeserve.cli import bench, compare, demo, serve, simulate
from cascadeserve.cli import plan, eval, fidelity, profile, calibrate, up

# isort: on
from cascadeserve.cli.root import app, console, err_console, print_json, set_invocation
from cascadeserve.cli.spelling import rewrite
from cascadeserve.errors import CascadeServeError

__all__ = ["app", "console", "err_console", "print_json", "run"]

# the command modules, in registration order (for readers and tests; importing them above is what registers)
_COMMAND_MODULES = (bench, compare, demo, serve, simulate, plan, eval, fidelity, profile, calibrate, up)

# Click's base exception, wherever this typer takes click from: recent typer vendors it as ``typer._click`` (and does
# not depend on ``click``), older typer re-exports ``click``'s own classes. ``typer.BadParameter`` derives from it.
_CLICK_ERRORS: tuple[type[Exception], ...] = tuple(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException" and issubclass(c, Exception)
)


def _warn(message: str) -> None:
    err_console.print(f"warning: {message}", highlight=False, markup=False, soft_wrap=True)  # one line, any width


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit code 2."""
    args = list(argv if argv is not None else sys.argv[1:])
    set_invocation(args)
    try:
        command = typer.main.get_command(app)
        # old option spellings still work, with a one-line warning each (cli/spelling.py)
        args = rewrite(command, args, _warn)
        rv = command.main(args=args, prog_name="cascadeserve", standalone_mode=False)
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
    return rv if isinstance(rv, int) else 0  # a typer.Exit inside a command comes back as its code
