"""Reading the JSON document a CLI command printed to the captured stdout."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

# Ray's driver runs a thread that prints cluster error notices ("(raylet) A worker died ...", about server actors
# that fault tests killed on purpose) to this process's stdout for as long as the session's Ray instance lives.
# They are not the command's output.
_RAY_NOTICE = re.compile(r"^(\x1b\[[0-9;]*m)?\(raylet\)")


def stdout_json(capsys: pytest.CaptureFixture[str]) -> Any:
    """The JSON document on the captured stdout, ignoring lines Ray's driver thread printed there."""
    return parse_json(capsys.readouterr().out)


def parse_json(out: str) -> Any:
    return json.loads("\n".join(line for line in out.splitlines() if not _RAY_NOTICE.match(line)))
