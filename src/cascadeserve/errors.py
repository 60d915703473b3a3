"""Exceptions that cascadeserve raises for problems a user can fix.

Every user-facing error derives from :class:`CascadeServeError`. The CLI turns one into a one-line message on
stderr and exit code 2, with no traceback. Errors about files carry the path and, where it is known, the line
and column, so a user can jump straight to the problem.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = [
    "CascadeServeError",
    "InfeasibleError",
    "PlanError",
    "ProfileError",
    "RequestError",
    "TraceError",
    "UpstreamError",
    "yaml_problem",
]


class CascadeServeError(Exception):
    """Base class for errors caused by user input or an unreachable objective (CLI exit code 2)."""

    exit_code = 2


class _LocatedError(CascadeServeError):
    """An error that points at a place in a file: ``path:line:column: message``."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        column: str | int | None = None,
    ) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.column = column
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.column is not None:
            where.append(f"column {self.column}")
        return f"{', '.join(where)}: {self.message}" if where else self.message


class ProfileError(_LocatedError):
    """A profile directory or one of its files is malformed."""


class PlanError(_LocatedError):
    """A gear plan is malformed or does not fit its profile or hardware."""


class TraceError(_LocatedError):
    """A trace file or trace spec cannot be read."""


class InfeasibleError(CascadeServeError):
    """The SLO cannot be met on the given hardware (raised by the planner, in the user's terms)."""


class UpstreamError(CascadeServeError):
    """An upstream stage (a remote OpenAI-compatible server) failed a batch: it could not be reached
    (``kind="connect"``), did not answer within its timeout (``"timeout"``), answered an HTTP error (``"status"``,
    with ``status``) or an answer that is not what the API promises (``"protocol"``). The message names the stage,
    the server and the upstream's status and reason; it never holds an API key."""

    def __init__(self, message: str, *, model: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.model, self.kind, self.status = model, kind, status


class RequestError(CascadeServeError):
    """A request that a stage cannot serve as it was asked, which the client can fix: a prompt (with the tokens
    asked for) past the stage's context. Raised by the model for the rows at fault; the stage-failure rule
    (:mod:`cascadeserve.policy.failure`) answers them with HTTP 400 and this message, ``param`` naming the request
    field (``prompt`` or ``messages``, as the front end names it) and ``code`` OpenAI's error code."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code

    def __reduce__(self) -> tuple[Any, ...]:  # keyword-only fields survive pickling (a Ray device raises it)
        return (_request_error, (str(self), self.param, self.code))


def _request_error(message: str, param: str | None, code: str | None) -> RequestError:
    return RequestError(message, param=param, code=code)


# a quoted fragment of a YAML problem that is the parser's own word (``'<stream end>'``) or one character (``'\\t'``)
_OWN_WORDS = re.compile(r"^'(<[a-z ]+>|\\?.)'$")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def yaml_problem(e: Any) -> tuple[int | None, int | None, str]:
    """A PyYAML error's 1-based line and column (``None`` where unknown) and its problem, holding no text of the
    file: ``str(e)`` quotes the offending line (a password on it came back in an error), and a problem may quote a
    token (an anchor's or a tag's name), so every quoted fragment but the parser's own words and single characters
    becomes ``'…'``."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or "not valid YAML"
    problem = _QUOTED.sub(lambda m: m.group(0) if _OWN_WORDS.match(m.group(0)) else "'…'", str(problem))
    if mark is None:
        return None, None, problem
    return int(mark.line) + 1, int(mark.column) + 1, problem
