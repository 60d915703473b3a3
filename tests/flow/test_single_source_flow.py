"""The flow makes no serving decision of its own: its exit rule, batch sizes and worker choice come from
``cascadeserve.policy`` (the same scan as tests/policy/test_single_source.py, over ``cascadeserve.flow``)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.policy.test_single_source import FORBIDDEN, _code_lines

FLOW = Path(__file__).resolve().parents[2] / "src" / "cascadeserve" / "flow"
# the one place the flow applies the exit rule: uncertain(), through policy.forwarding.sure_mask
ALLOWED = {("models.py", "the exit rule applied outside PlanTables.exits")}


def test_the_flow_decides_nothing_itself() -> None:
    found = [
        f"flow/{path.name}:{i}: {why}: {line.strip()}"
        for path in sorted(FLOW.glob("*.py"))
        for i, line in _code_lines(path)
        for pattern, why in FORBIDDEN.items()
        if re.search(pattern, line) and (path.name, why) not in ALLOWED
    ]
    assert not found, "decisions outside cascadeserve.policy:\n" + "\n".join(found)
    uses = [p.name for p in FLOW.glob("*.py") if "batch_size(" in p.read_text() or "pick_worker(" in p.read_text()]
    assert sorted(uses) == ["batching.py", "local.py", "on_ray.py"]
