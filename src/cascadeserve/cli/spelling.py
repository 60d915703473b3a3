"""One spelling per concept: the options' current names, and the old spellings that keep working for a release.

Across commands a concept has one option name: the latency SLO is ``--slo-p95-ms``, the accuracy SLO
``--slo-accuracy``, durations end in ``-s`` (``--duration-s``), the highest QPS is ``--max-qps``, a server is
``--url``, a bearer token for inference ``--auth-token``, and input files and folders are options (``--profile DIR``,
``--plan FILE``), never positional arguments (except ``up``'s and ``init``'s workload file or folder).

The old spellings are rewritten here, before the command line is parsed, with a one-line deprecation warning on
stderr; they never appear in ``--help``. :func:`rewrite` takes the tree of click commands (to know which options
take a value) and the arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["OLD_OPTIONS", "POSITIONAL", "rewrite"]

# command path -> {old option: current option}; "*" applies wherever the command has the current option and not
# the old one as an option of its own
OLD_OPTIONS: dict[str, dict[str, str]] = {
    "*": {
        "--slo-ms": "--slo-p95-ms",
        "--latency-slos": "--slo-p95-ms",
        "--accuracy-targets": "--slo-accuracy",
        "--duration": "--duration-s",
        "--seconds": "--duration-s",
        "--peak-qps": "--max-qps",
        "--plans": "--plan",
        "--server": "--url",
        "--token": "--auth-token",
    },
    "eval planner": {"--slos": "--slo-count"},
    "bench": {"--model": "--name"},  # the served V2 model's name, as serve --name gives it
    "profile measure": {"--name": "--profile-name"},  # --name is a served model's name everywhere
    "compare": {"--plots": "--plot"},  # a figure's (or figures' folder) path, as every --plot
    "report": {"--real": "--runtime"},  # runs on the runtime, with emulated devices
}
# command path -> the option its old positional argument is now
POSITIONAL: dict[str, str] = {
    "profile show": "--profile",
    "profile frontier": "--profile",
    "profile signals": "--profile",
    "profile calibrate": "--profile",
    "plan explain": "--plan",
}


def _options(cmd: Any) -> dict[str, bool]:
    """Every option string of ``cmd`` -> whether it takes a value."""
    out: dict[str, bool] = {"--help": False}
    for p in getattr(cmd, "params", []):
        if getattr(p, "param_type_name", "") != "option":
            continue
        takes = not (getattr(p, "is_flag", False) or getattr(p, "count", False))
        for o in [*p.opts, *p.secondary_opts]:
            out[o] = takes
    return out


def _command(root: Any, args: list[str]) -> tuple[Any, list[str], int]:
    """The leaf command ``args`` names, its path, and the index where its own arguments start."""
    cmd, path, i = root, [], 0
    while i < len(args) and hasattr(cmd, "commands"):
        sub = cmd.commands.get(args[i])
        if sub is None:
            break
        cmd, i = sub, i + 1
        path.append(args[i - 1])
    return cmd, path, i


def rewrite(root: Any, args: list[str], warn: Callable[[str], None]) -> list[str]:
    """``args`` with old spellings replaced by the current ones; ``warn`` gets one line per replacement."""
    cmd, path, start = _command(root, args)
    name = " ".join(path)
    opts = _options(cmd)
    table = {
        old: new
        for old, new in {**OLD_OPTIONS["*"], **OLD_OPTIONS.get(name, {})}.items()
        if new in opts and old not in opts
    }
    positional = POSITIONAL.get(name)
    out = list(args[:start])
    i = start
    while i < len(args):
        tok = args[i]
        if tok == "--":
            out += args[i:]
            break
        key, eq, value = tok.partition("=")
        if key in table:
            warn(f"{key} is deprecated and will be removed; use {table[key]}")
            out.append(table[key] + eq + value)
            key = table[key]
        elif tok.startswith("-") or positional is None:
            out.append(tok)
        else:
            warn(f"the {positional[2:]} as a positional argument is deprecated; use {positional} {tok}")
            out += [positional, tok]
            positional = None  # one positional input per command
            i += 1
            continue
        if key.startswith("--") and not eq and opts.get(key, False) and i + 1 < len(args):
            out.append(args[i + 1])  # the option's value, whatever it looks like
            i += 1
        i += 1
    return out
