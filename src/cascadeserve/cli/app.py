"""The assembled command line: every command module registered on the root app, and :func:`run` with the shared
error handling.

The root app and the output helpers live in :mod:`cascadeserve.cli.root`, which the command modules import; this
module imports the command modules (each adds its group or command to the app when imported), so there is no
import cycle. ``app``, ``console``, ``err_console`` and ``print_json`` are re-exported from ``root``.

The command modules are imported when needed, not with this module: :func:`run` imports only the ones that
register the command its arguments name (``serve`` needs neither scipy, the planner nor the load generator, and a
subprocess that serves starts about a second sooner for it), and reading ``app`` from this module or the package
imports them all, so that the app it returns is the whole command line.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer

from cascadeserve.cli import root
from cascadeserve.cli.root import console, err_console, print_json, set_invocation
from cascadeserve.cli.spelling import rewrite
from cascadeserve.errors import CascadeServeError

if TYPE_CHECKING:  # bound by __getattr__ below, once every command is registered
    from cascadeserve.cli.root import app

__all__ = ["app", "console", "err_console", "print_json", "run"]

# The command modules, in registration order: `--help` lists the commands in this order (commands first, then
# groups), whichever were imported first; keep it, not the alphabetical one.
COMMAND_MODULES = (
    "bench",
    "compare",
    "demo",
    "serve",
    "simulate",
    "plan",
    "eval",
    "fidelity",
    "profile",
    "calibrate",
    "up",
)
# each top-level command or group -> the modules that register it or its subcommands (a module imports the others
# it needs: `up` runs `profile measure`, `plan` and `serve`); tests/cli/test_lazy_commands.py checks this against
# the app with every module imported
COMMANDS: dict[str, tuple[str, ...]] = {
    "bench": ("bench",),
    "compare": ("compare",),
    "report": ("compare",),
    "demo": ("demo",),
    "serve": ("serve",),
    "simulate": ("simulate",),
    "plan": ("plan",),
    "eval": ("eval", "fidelity"),
    "profile": ("profile", "calibrate"),
    "up": ("up",),
    "init": ("up",),
    "workload": ("up",),
}

# Click's base exception, wherever this typer takes click from: recent typer vendors it as ``typer._click`` (and does
# not depend on ``click``), older typer re-exports ``click``'s own classes. ``typer.BadParameter`` derives from it.
_CLICK_ERRORS: tuple[type[Exception], ...] = tuple(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException" and issubclass(c, Exception)
)


def __getattr__(name: str) -> Any:
    if name == "app":
        return load_commands(None)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_commands(args: Sequence[str] | None) -> typer.Typer:
    """The root app with the commands ``args`` names registered (the first argument that is not an option names
    one); every command when ``args`` is None, names none (``--help``) or names no known command (so that click's
    error lists them all)."""
    first = next((a for a in args if not a.startswith("-")), None) if args is not None else None
    modules = COMMANDS.get(first, COMMAND_MODULES) if first is not None else COMMAND_MODULES
    for m in modules:
        importlib.import_module(f"cascadeserve.cli.{m}")
    _sort_registrations(root.app)
    return root.app


def _sort_registrations(app: typer.Typer) -> None:
    """Put the commands and groups in :data:`COMMAND_MODULES`'s order, however they were imported (a process that
    ran ``serve`` and then asks for ``--help`` imported serve's module first). The sorts are stable: a module's own
    commands keep the order it registers them in."""

    def rank(callback: Any) -> int:
        module = getattr(callback, "__module__", "").rpartition(".")[2]
        return COMMAND_MODULES.index(module) if module in COMMAND_MODULES else len(COMMAND_MODULES)

    app.registered_commands.sort(key=lambda c: rank(c.callback))
    # a group's rank is that of the module that created it (the one that registers its first command)
    app.registered_groups.sort(
        key=lambda g: (
            min((rank(c.callback) for c in g.typer_instance.registered_commands), default=0)
            if g.typer_instance is not None
            else 0
        )
    )


def _warn(message: str) -> None:
    err_console.print(f"warning: {message}", highlight=False, markup=False, soft_wrap=True)  # one line, any width


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit code 2."""
    args = list(argv if argv is not None else sys.argv[1:])
    set_invocation(args)
    try:
        # get_group, not get_command: typer makes an app of one command that command itself (no name to give), and
        # `serve` alone registers one
        command = typer.main.get_group(load_commands(args))
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
