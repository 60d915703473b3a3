"""What each engine may take from ``cascadeserve.policy``, checked on the syntax tree rather than on spellings.

``tests/policy/test_single_source.py`` greps for the tell-tale spellings of a decision (a certainty compared with a
threshold, a router picked directly). This test states the engines' contract with the policy structurally, so that
a decision re-implemented in an engine under any spelling, or policy state changed behind the policy's back, fails:

1. **Imports.** :data:`CONTRACT` lists, per engine package (``simulate``, ``runtime``, ``backends``), every policy
   module and name it may import: the decision objects and functions it applies. Anything else, the rules
   themselves included (the kernels, the exit rule, the round-robin), is refused; only the compiled loop
   (``simulate/loop.py`` and its queue helpers) takes the kernels, which it compiles as twins. A name listed but no
   longer imported fails too, so the list stays the true surface.
2. **No private reads across objects** (in the engines and in the policy): ``x._field`` only on ``self``/``cls``.
3. **No writes into policy objects**: an engine does not assign, augment or delete a field of a policy object (one
   it holds by a name of :data:`POLICY_HOLDERS`, as in ``gear_policy.selector.qps_scale = s`` or
   ``del self.tuning.changes[:-256]``); it calls the owner's method or applies a returned decision.

An import-linter contract in ``pyproject.toml`` states the module half of (1) for the packages as a whole.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "cascadeserve"
ENGINES = ("simulate", "runtime", "backends")

# The rules themselves: the compiled loop's kernels, the exit rule and the round-robin. No engine imports them
# (the compiled loop binds the kernels as compiled twins; it is listed on its own below).
_KERNELS = frozenset({
    "admitted", "aimd_next", "audit_pick", "capped_min_queue", "compile_calling_kernels", "fire_time", "prefer",
    "scheduled_gear", "select_gear", "stage_exits", "swrr_pick", "take_count", "takes_forwarded", "windowed_qps",
})  # fmt: skip

_LOOP_KERNELS = frozenset({
    "admitted", "aimd_next", "compile_calling_kernels", "scheduled_gear", "select_gear", "windowed_qps",
})  # fmt: skip
COMPILED = ("simulate/loop.py", "simulate/loop_queues.py")

CONTRACT: dict[str, dict[str, frozenset[str]]] = {
    # simulate/ applies no batch, routing or exit decision in Python at all: its reference engine is the runtime on a
    # virtual clock, and its compiled loop binds the kernels (below); what it imports here only configures a run.
    "simulate": {
        "cascadeserve.policy": frozenset({
            "AdmissionPolicy", "AimdBatchLimit", "GearPolicy", "GearSchedule", "PlanTables", "QpsMeter",
        }),
        "cascadeserve.policy.adaptive": frozenset({"BatchLimit", "batch_limit_for"}),
        "cascadeserve.policy.cache": frozenset({"PredictionCache"}),
        "cascadeserve.policy.drift": frozenset({"DriftDecision"}),
        "cascadeserve.policy.qps": frozenset({"max_window_ticks"}),
        "cascadeserve.policy.replan": frozenset({"DriftSettings", "LoadDrift", "ReplanVerdict", "plan_in_force"}),
        "cascadeserve.policy.tuning": frozenset({"OnlineTuning", "ThresholdDecision"}),
    },
    # the compiled loop and its queue helpers bind the kernels as compiled twins, between them every one
    "simulate/loop.py": {"cascadeserve.policy.kernels": _LOOP_KERNELS},
    "simulate/loop_queues.py": {"cascadeserve.policy.kernels": _KERNELS - _LOOP_KERNELS},
    "runtime": {
        "cascadeserve.policy": frozenset({
            "AdmissionPolicy", "AimdBatchLimit", "BatchMembers", "BatchTrigger", "DrainMeter", "GearDecision",
            "GearSchedule", "PlanTables", "QpsMeter", "Readiness", "Routers", "WaitBudget", "batch_members",
            "batch_size", "next_batch", "on_deadline", "readiness",
        }),
        "cascadeserve.policy.adaptive": frozenset({"BatchLimit", "Batching", "batch_limit_for", "capped_trigger"}),
        "cascadeserve.policy.cache": frozenset({"PredictionCache", "input_key"}),
        "cascadeserve.policy.costs": frozenset(
            {"CostDrift", "CostSettings", "CostWatch", "mean_and_p95", "trimmed_mean"}
        ),
        "cascadeserve.policy.drift": frozenset({"DriftDecision"}),
        "cascadeserve.policy.episodes": frozenset(
            {"EpisodeSettings", "ShedEpisode", "ShedWatch", "SloEpisode", "SloWatch"}
        ),
        "cascadeserve.policy.failure": frozenset({"FailureKind", "StageFailureDecision", "on_stage_failure"}),
        "cascadeserve.policy.replan": frozenset({"DriftSettings", "LoadDrift", "ReplanVerdict", "planned_weights"}),
        "cascadeserve.policy.thresholds": frozenset({"ThresholdDecision"}),
        "cascadeserve.policy.tuning": frozenset({"OnlineTuning", "ThresholdDecision"}),
    },
    "backends": {
        "cascadeserve.policy": frozenset({"AimdBatchLimit", "PlanTables"}),
        "cascadeserve.policy.failover": frozenset({"on_server_lost"}),
        "cascadeserve.policy.thresholds": frozenset({"ThresholdDecision"}),
    },
}


def _files(pkg: str) -> list[Path]:
    return sorted(p for p in (SRC / pkg).rglob("*.py") if p.is_file())


def _scope(path: Path) -> str:
    rel = path.relative_to(SRC).as_posix()
    return rel if rel in CONTRACT else rel.split("/", 1)[0]


def policy_imports(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """``(line, module, name)`` of every import from the policy package."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cascadeserve.policy"):
            for alias in node.names:
                yield node.lineno, node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("cascadeserve.policy"):
                    yield node.lineno, alias.name, "*"


def _chain(node: ast.expr) -> tuple[str, list[str]]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else "<expr>"), parts[::-1]


def private_reads(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``x._field`` on anything but ``self`` or ``cls`` (dunders aside)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base, parts = _chain(node)
            if not (base in ("self", "cls") and len(parts) == 1):
                yield node.lineno, ".".join([base, *parts])


# The names by which the engines hold policy objects (plan tables, the gear policy and its selector, tuning, routers,
# adaptive batch limits, the prediction cache): a write that passes through one of them changes policy state.
POLICY_HOLDERS = frozenset({
    "tables", "tb", "selector", "gear_policy", "policy", "tuning", "tuner", "auditor", "routers", "batch_limit",
    "limiter", "limit", "schedule", "cache", "drift", "meter",
})  # fmt: skip


def writes_through(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Assignments, augmented assignments and deletions of a field of a policy object reached by name (one of
    :data:`POLICY_HOLDERS`, as a local or as another object's field): ``gear_policy.selector.qps_scale = s``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        for t in flat:
            while isinstance(t, ast.Subscript):
                t = t.value
            if isinstance(t, ast.Attribute):
                base, parts = _chain(t)
                if POLICY_HOLDERS & {base, *parts[:-1]}:
                    yield t.lineno, ".".join([base, *parts])


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(SRC).as_posix()}:{line}"


@pytest.mark.parametrize("pkg", ENGINES)
def test_each_engine_imports_only_its_contract_from_the_policy(pkg: str) -> None:
    found: dict[str, dict[str, set[str]]] = {}
    bad = []
    for path in _files(pkg):
        scope = _scope(path)
        allowed = CONTRACT[scope]
        for line, module, name in policy_imports(ast.parse(path.read_text(encoding="utf-8"))):
            found.setdefault(scope, {}).setdefault(module, set()).add(name)
            if name not in allowed.get(module, frozenset()):
                bad.append(f"{_where(path, line)}: {module}.{name} is not in the {scope!r} contract")
    assert not bad, "imports from the policy outside the engine's contract:\n" + "\n".join(bad)
    for scope in [s for s in CONTRACT if s.split("/", 1)[0] == pkg]:
        stale = {m: sorted(n - found.get(scope, {}).get(m, set())) for m, n in CONTRACT[scope].items()}
        assert not any(stale.values()), f"{scope}: listed but no longer imported: {stale}"


def test_no_engine_imports_a_rule_itself() -> None:
    """The kernels, the exit rule and the round-robin appear in no engine contract but the compiled loop's."""
    rules = _KERNELS | {"is_sure", "sure_mask", "sure_list", "SmoothWeightedRoundRobin", "swrr_sequence"}
    for scope, modules in CONTRACT.items():
        if scope not in COMPILED:
            assert not any(rules & names for names in modules.values()), scope
            assert not {"cascadeserve.policy.kernels", "cascadeserve.policy.forwarding"} & set(modules), scope


def _offences(pkg: str, find: Callable[[ast.AST], Iterable[tuple[int, str]]]) -> list[str]:
    """``file:line: expression`` for every place ``find`` reports in the package's files."""
    trees = [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in _files(pkg)]
    return [f"{_where(p, line)}: {expr}" for p, tree in trees for line, expr in find(tree)]


@pytest.mark.parametrize("pkg", [*ENGINES, "policy"])
def test_nobody_reads_another_objects_private_fields(pkg: str) -> None:
    bad = _offences(pkg, private_reads)
    assert not bad, "private fields read from outside their object:\n" + "\n".join(bad)


@pytest.mark.parametrize("pkg", ENGINES)
def test_no_engine_writes_through_another_object(pkg: str) -> None:
    bad = _offences(pkg, writes_through)
    assert not bad, "fields written through another object (call its method, or apply a decision):\n" + "\n".join(bad)


def test_the_checks_catch_what_they_name() -> None:
    """Each check catches the defect it is for (the forms the engines had before decisions were values)."""
    code = ast.parse(
        "from cascadeserve.policy.kernels import is_sure\n"
        "from cascadeserve.policy import sure_mask\n"
        "routes = tables._routes\n"
        "gear_policy.selector.qps_scale = 2.0\n"
        "self.runtime.current.gear_policy.selector.qps_scale = 2.0\n"
        "del self.tuning.changes[:-256]\n"
        "self.own = 1\n"
        "req.best = None\n"
        "self.stats.scale = 2.0\n"
    )
    imports = [(m, n) for _, m, n in policy_imports(code)]
    assert all(n not in CONTRACT["runtime"].get(m, frozenset()) for m, n in imports) and len(imports) == 2
    assert [e for _, e in private_reads(code)] == ["tables._routes"]
    assert [e for _, e in writes_through(code)] == [
        "gear_policy.selector.qps_scale",
        "self.runtime.current.gear_policy.selector.qps_scale",
        "self.tuning.changes",
    ]
