"""Triton's trace settings (``GET``/``POST /v2/trace/setting``, ``/v2/models/{m}/trace/setting``, gRPC
``TraceSetting``; :mod:`cascadeserve.http.settings` serves them), kept and answered with Triton's fields, for tools
that read or set them.

This server does not trace requests: ``trace_level`` is ``["OFF"]`` and stays so. A request to turn tracing on
(``TIMESTAMPS``, ``TENSORS``) is refused with 400 saying tracing is not built in, as a Triton built without
tracing refuses it, rather than accepted and ignored. The other settings are kept as Triton keeps them and answered
as strings, as Triton answers them: ``trace_rate`` (every how many requests one would be traced, default
``"1000"``), ``trace_count`` (how many, ``"-1"``: no limit), ``log_frequency`` (``"0"``), ``trace_file`` (``""``)
and ``trace_mode`` (``"triton"``). Settings are the server's, and a model's override them for that model; ``null``
(gRPC: no values) clears a setting: a model's falls back to the server's, the server's to its default. The trace
file and mode cannot be changed over the network (400), as Triton refuses the file; a value that is not a number
in its range, or an unknown setting, is refused naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from cascadeserve.http.v2 import ProtocolError

__all__ = ["DEFAULTS", "TraceSettings"]

DEFAULTS: dict[str, Any] = {
    "trace_level": ["OFF"],
    "trace_rate": 1000,
    "trace_count": -1,
    "log_frequency": 0,
    "trace_file": "",
    "trace_mode": "triton",
}
"""Each setting's value before any change (Triton's defaults)."""

_log = logging.getLogger("cascadeserve.settings")
_RANGES = {"trace_rate": (0, 2**32 - 1), "trace_count": (-1, 2**31 - 1), "log_frequency": (0, 2**32 - 1)}
_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")


def _level(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f'trace_level: expected a list of levels such as ["OFF"], got {value!r}')
    unknown = [v for v in value if v not in _LEVELS]
    if unknown:
        raise ProtocolError(f"trace_level: {unknown[0]!r} is not one of {', '.join(_LEVELS)}")
    if value != ["OFF"]:
        if "OFF" in value:
            raise ProtocolError('trace_level: "OFF" comes alone')
        raise ProtocolError(
            'trace_level: this server does not trace requests (tracing is not built in); only ["OFF"] is accepted'
        )
    return ["OFF"]


def _number(name: str, value: Any) -> int:
    """A number setting, given as Triton takes it (a string of digits) or as a JSON integer."""
    low, high = _RANGES[name]
    n: int | None = None
    if type(value) is int:
        n = value
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 32:
        n = int(value)
    if n is None or not low <= n <= high:
        raise ProtocolError(f"{name}: expected an integer from {low} to {high} (as a string), got {value!r}")
    return n


class TraceSettings:
    """The server's trace settings and each model's overrides (module docstring)."""

    def __init__(self) -> None:
        self.server: dict[str, Any] = {}
        self.models: dict[str, dict[str, Any]] = {}

    def snapshot(self, model: str | None = None) -> dict[str, Any]:
        """Every setting in force (for ``model``: the server's with its overrides), in Triton's JSON form."""
        merged = {**DEFAULTS, **self.server, **(self.models.get(model, {}) if model is not None else {})}
        return {k: list(v) if k == "trace_level" else str(v) for k, v in merged.items()}

    def update(self, settings: Mapping[str, Any], model: str | None = None) -> dict[str, Any]:
        """Apply ``settings`` to the server's (or ``model``'s) settings, all checked first, and answer with every
        setting in force there."""
        values: dict[str, Any] = {}
        for name, value in settings.items():
            if name in ("trace_file", "trace_mode") and value is not None:
                raise ProtocolError(f"{name}: cannot be changed over the network")
            if name not in DEFAULTS:
                raise ProtocolError(f"{name}: not a trace setting (the settings are {', '.join(DEFAULTS)})")
            if value is None:
                values[name] = None
            elif name == "trace_level":
                values[name] = _level(value)
            else:
                values[name] = _number(name, value)
        target = self.server if model is None else self.models.setdefault(model, {})
        for name, value in values.items():
            if value is None:
                target.pop(name, None)  # cleared: the server's (or the default) applies again
            else:
                target[name] = value
        if values:
            where = "the server's" if model is None else f"model {model!r}'s"
            _log.info("%s trace settings changed: %s", where, ", ".join(f"{k}={v!r}" for k, v in values.items()))
        return self.snapshot(model)
