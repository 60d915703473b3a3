"""What ``GET /v2/cascade/plan`` shows under online threshold tuning (``serve --tune``).

The plan in force, with each gear's thresholds replaced by those the tuner set (so the document describes what is
served), and a ``"tuning"`` report: the reference, the audit fraction, per gear the thresholds, target, window size
and window accuracy, and a bounded list of recent changes (old, new, window accuracy, predicted accuracy and work,
reason, time on the server's monotonic clock). The report is output only: ``PUT`` ignores it, so a plan read back
may be put back as it is.
"""

from __future__ import annotations

import json
from typing import Any

from cascadeserve.plan import GearPlan
from cascadeserve.runtime.tuning import ServingTuning

__all__ = ["drop_tuning_report", "tuned_plan_json"]


def tuned_plan_json(plan: GearPlan, tuning: ServingTuning) -> dict[str, Any]:
    gears = tuple(g.model_copy(update={"thresholds": tuning.tables.thresholds_of(i)}) for i, g in enumerate(plan.gears))
    doc: dict[str, Any] = json.loads(plan.model_copy(update={"gears": gears}).to_json(indent=None))
    doc["tuning"] = tuning.snapshot()
    return doc


def drop_tuning_report(text: str) -> str:
    """``text`` without a top-level ``"tuning"`` report (unchanged when it has none or is not JSON)."""
    if '"tuning"' not in text:
        return text
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return text  # the plan reader names the problem
    if isinstance(obj, dict) and "tuning" in obj:
        del obj["tuning"]
        return json.dumps(obj)
    return text
