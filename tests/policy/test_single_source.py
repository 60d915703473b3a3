"""Every serving decision has one source, ``cascadeserve.policy``: no engine decides on its own.

The simulator, the runtime, the Ray backend and the HTTP front end must *apply* the policy's decisions, never
compare a certainty with a threshold, pick a replica, size a batch or pick a gear themselves (a second copy of a
decision is how a simulator and a runtime drift apart). This test reads their source and fails on the tell-tale
forms of each decision, naming the file and line. The structural half of the guard, which holds whatever the
spelling, is ``tests/policy/test_engine_contracts.py`` (what each engine may import from the policy; no private
reads; no writes into policy objects) and the import-linter contract on the kernels, the exit rule and the router.

``cascade.py`` is the planner's offline evaluator (accuracy and the fraction reaching each stage, vectorised over
the validation set with bitsets); it sits below ``policy`` in the layers and is cross-checked against the
simulator by ``tests/test_cascade.py``, so it is not an engine and is not scanned.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "cascadeserve"
POLICY = SRC / "policy"

FORBIDDEN: dict[str, str] = {
    # certainty against threshold
    r"\bcert\w*\s*(>=|<=|<|>)\s*\w*thr": "a certainty compared with a threshold",
    r"\bthr\w*\s*(>=|<=|<|>)\s*\w*cert": "a certainty compared with a threshold",
    r"\.threshold\[": "a threshold looked up by gear",
    r"\b(sure_mask|is_sure)\(": "the exit rule applied outside PlanTables.exits",
    # replica choice
    r"\.pick(_many)?\(": "a replica picked by a router directly",
    r"\.route\([^)]*\)\.replicas\[": "a replica picked from a route",
    r"\b(choose_replica|earliest_replica)\b": "a replica choice outside next_batch",
    r"SmoothWeightedRoundRobin\(": "a router built outside the policy",
    # batch sizing and triggers
    r"\.take\(len\(": "a batch sized outside batch_size",
    r"BatchTrigger\(": "a batch trigger built outside the policy",
    r"(trig\w*|triggers\[[^]]*\])\.ready\(": "a trigger asked outside next_batch",
    # audit sampling (which early exits also run the remaining stages)
    r"\bauditor\.take\(": "an audit picked outside AuditSampler.split",
    # gear choice
    r"\bselector\.(decide|lookup)\(": "a gear chosen outside GearPolicy",
    r"\.gear_at\(": "a scheduled gear read outside GearPolicy",
}

ENGINES = ["simulate", "runtime", "backends", "http", "baselines", "eval", "demo", "cli"]


def _engine_files() -> list[Path]:
    files: list[Path] = []
    for pkg in ENGINES:
        root = SRC / pkg
        files += sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]
    return [f for f in files if f.is_file()]


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """Lines of code with comments and docstrings dropped (prose may name a decision; code may not make one)."""
    out: list[tuple[int, str]] = []
    in_doc = False
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        quotes = stripped.count('"""')
        if in_doc:
            in_doc = quotes % 2 == 0
            continue
        if stripped.startswith('"""'):
            in_doc = quotes == 1
            continue
        out.append((i, line.split("#", 1)[0]))
    return out


def test_the_scan_covers_the_engines() -> None:
    names = {p.relative_to(SRC).as_posix() for p in _engine_files()}
    assert "simulate/engine.py" in names and "runtime/consumer.py" in names and "runtime/producer.py" in names
    assert not any(n.startswith("policy/") for n in names)


@pytest.mark.parametrize("path", _engine_files(), ids=lambda p: p.relative_to(SRC).as_posix())
def test_no_engine_makes_a_decision_itself(path: Path) -> None:
    found = [
        f"{path.relative_to(SRC)}:{i}: {why}: {line.strip()}"
        for i, line in _code_lines(path)
        for pattern, why in FORBIDDEN.items()
        if re.search(pattern, line)
    ]
    assert not found, "decisions outside cascadeserve.policy:\n" + "\n".join(found)


def test_the_scan_would_catch_a_second_copy(tmp_path: Path) -> None:
    """The patterns are not vacuous: each catches the form it names."""
    samples = [
        "        sure = certs >= threshold",
        "        thr = tables.threshold[gear, row]",
        "        r = self.routers[(g, row)].pick()",
        "        size = min(trig.take(len(q)), cap)",
        "        gear = tb.selector.decide(gear, qps, q0).gear",
        "        gear = schedule.gear_at(k)",
        "        drain = BatchTrigger(1, None, None)",
        "        if gen.triggers[r].ready(n, oldest, now):",
    ]
    for s in samples:
        assert any(re.search(p, s) for p in FORBIDDEN), s
