"""Triton's logging extension: the server's log settings, read and changed while it runs (``GET``/``POST
/v2/logging``, gRPC ``LogSettings``; :mod:`cascadeserve.http.settings` serves them).

The server writes the lines of its loggers (``cascadeserve`` and every ``cascadeserve.*`` one) to stderr through one
handler of its own, installed when a server starts (as uvicorn writes its own loggers'); the records still reach the
root logger's handlers, so a program that set up logging, or pytest's ``caplog``, sees them there too. The settings
map onto that handler and the ``cascadeserve`` logger's level:

* ``log_error``, ``log_warning``, ``log_info`` (booleans): whether lines of that level are written. By default
  errors and warnings are and information is not, which is what the server always wrote (Triton writes information
  lines by default too: set ``log_info`` to have them);
* ``log_verbose_level`` (an integer, 0 or more): above 0, debug lines are written too (this server has one verbose
  level: any level above 0 writes them all);
* ``log_format``: ``"default"``, the message alone, as the server always wrote it, or ``"ISO8601"``, each line
  prefixed as Triton's ISO8601 format does: ``2026-12-04T10:15:02Z W 4242 events.py:88] ...`` (UTC time, the
  level's initial, the process id, the file and line);
* ``log_file``: ``""`` (stderr); it cannot be changed over the network (a client choosing a path the server writes
  to), as Triton refuses it.

A change applies at once to every line after it (the change itself is an information line,
``cascadeserve.settings``) and answers with every setting. Values of the wrong type, a
negative verbose level, an unknown format or setting are refused (400 naming it); ``null`` leaves a setting as it
is, as Triton reads it. Settings are the process's: every server in it shares them, as they share the loggers.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

from cascadeserve.http.v2 import ProtocolError

__all__ = ["FORMATS", "LOG", "LogSettings"]

FORMATS = ("default", "ISO8601")
_BOOLS = ("log_info", "log_warning", "log_error")
_UINT32_MAX = 2**32 - 1


class _Iso8601(logging.Formatter):
    """Triton's ISO8601 layout: ``2026-12-04T10:15:02Z I 4242 file.py:12] message`` (UTC)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        head = f"{stamp} {record.levelname[:1]} {record.process} {record.filename}:{record.lineno}]"
        message = super().format(record)  # the message, with a traceback where the record has one
        return f"{head} {message}"


class _Stderr(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (as logging's last resort does: a replaced stderr is followed)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


class LogSettings:
    """The server's log settings and the handler they drive (module docstring); :data:`LOG` is the process's."""

    def __init__(self, logger: str = "cascadeserve") -> None:
        self.logger = logging.getLogger(logger)
        self.log_info = False
        self.log_warning = True
        self.log_error = True
        self.log_verbose_level = 0
        self.log_format = "default"
        self.handler = _Stderr()
        self.handler.addFilter(self._wanted)
        self._formats = {"default": logging.Formatter("%(message)s"), "ISO8601": _Iso8601("%(message)s")}
        self.handler.setFormatter(self._formats["default"])
        self._raised = False  # whether the logger's level is ours (then lowered back when no setting needs it)

    def install(self) -> None:
        """Write the loggers' lines through the handler (idempotent: a server starting calls it)."""
        if self.handler not in self.logger.handlers:
            self.logger.addHandler(self.handler)
        self._apply()

    def _wanted(self, record: logging.LogRecord) -> bool:
        level = record.levelno
        if level >= logging.ERROR:
            return self.log_error
        if level >= logging.WARNING:
            return self.log_warning
        if level >= logging.INFO:
            return self.log_info
        return self.log_verbose_level > 0

    def _apply(self) -> None:
        # records below the root's WARNING are made only where a setting wants them; otherwise the logger's level
        # is left to whoever set it
        if self.log_verbose_level > 0 or self.log_info:
            self.logger.setLevel(logging.DEBUG if self.log_verbose_level > 0 else logging.INFO)
            self._raised = True
        elif self._raised:
            self.logger.setLevel(logging.NOTSET)
            self._raised = False
        self.handler.setFormatter(self._formats[self.log_format])

    def snapshot(self) -> dict[str, Any]:
        """Every setting, as Triton answers them."""
        return {
            "log_file": "",
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format,
        }

    def update(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Apply ``settings`` (all checked first: a refused one changes nothing) and answer with every setting."""
        changes: dict[str, Any] = {}
        for name, value in settings.items():
            if value is None:  # null leaves the setting as it is
                continue
            if name == "log_file":
                raise ProtocolError("log_file: cannot be changed over the network (the server writes to stderr)")
            if name in _BOOLS:
                if type(value) is not bool:
                    raise ProtocolError(f"{name}: expected true or false, got {value!r}")
            elif name == "log_verbose_level":
                if type(value) is not int or not 0 <= value <= _UINT32_MAX:
                    raise ProtocolError(f"log_verbose_level: expected an integer from 0, got {value!r}")
            elif name == "log_format":
                if value not in FORMATS:
                    raise ProtocolError(f"log_format: expected one of {', '.join(FORMATS)}, got {value!r}")
            else:
                known = ", ".join(["log_file", *_BOOLS, "log_verbose_level", "log_format"])
                raise ProtocolError(f"{name}: not a log setting (the settings are {known})")
            changes[name] = value
        for name, value in changes.items():
            setattr(self, name, value)
        self._apply()
        if changes:  # a line of its own, at information level: written only where log_info is on (now)
            self.logger.getChild("settings").info("log settings changed: %s", _listed(changes))
        return self.snapshot()


def _listed(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in settings.items())


LOG = LogSettings()
"""The process's log settings (every server in it shares the loggers)."""
