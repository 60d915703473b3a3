"""The public API of the core packages. A change to any ``__all__`` must be deliberate: update this list with it."""

from __future__ import annotations

import importlib

import pytest

from cascadeserve.errors import CascadeServeError, InfeasibleError, PlanError, ProfileError, TraceError

EXPECTED: dict[str, list[str]] = {
    "cascadeserve": ["__version__"],
    "cascadeserve.errors": ["CascadeServeError", "InfeasibleError", "PlanError", "ProfileError", "TraceError"],
    "cascadeserve.profile": [
        "CERTAINTY_FUNCTIONS",
        "CertaintyFn",
        "ModelProfile",
        "Profile",
        "RuntimeCurve",
        "certainty_function",
        "load_profile",
        "margin",
        "max_probability",
        "negative_entropy",
        "save_profile",
    ],
    "cascadeserve.profile.certainty": [
        "CERTAINTY_FUNCTIONS",
        "CertaintyFn",
        "certainty_function",
        "margin",
        "max_probability",
        "negative_entropy",
        "to_probabilities",
    ],
    "cascadeserve.profile.io": ["load_profile", "save_profile"],
    "cascadeserve.profile.profile": ["ModelProfile", "Profile"],
    "cascadeserve.profile.runtime": ["RuntimeCurve"],
    "cascadeserve.cascade": [
        "BITSET_MAX_SAMPLES",
        "Cascade",
        "CascadeEval",
        "enumerate_frontier",
        "evaluate",
        "pareto_front",
    ],
    "cascadeserve.plan": [
        "SCHEMA_VERSION",
        "SLO",
        "Device",
        "Gear",
        "GearPlan",
        "GearReplica",
        "Replica",
        "fixed_plan",
        "load_plan",
    ],
    "cascadeserve.policy": [
        "LAST_STAGE",
        "AimdBatchLimit",
        "AimdDecision",
        "BatchTrigger",
        "GearDecision",
        "GearSchedule",
        "GearSelector",
        "PlanTables",
        "QpsMeter",
        "Route",
        "SmoothWeightedRoundRobin",
        "choose_replica",
        "earliest_replica",
        "is_sure",
        "sure_mask",
        "swrr_sequence",
    ],
    "cascadeserve.policy.aimd": ["AimdBatchLimit", "AimdDecision"],
    "cascadeserve.policy.batching": ["BatchTrigger", "choose_replica", "earliest_replica"],
    "cascadeserve.policy.forwarding": ["LAST_STAGE", "is_sure", "sure_mask"],
    "cascadeserve.policy.gears": ["GearDecision", "GearSelector"],
    "cascadeserve.policy.qps": ["QpsMeter"],
    "cascadeserve.policy.routing": ["SmoothWeightedRoundRobin", "swrr_sequence"],
    "cascadeserve.policy.schedule": ["GearSchedule"],
    "cascadeserve.policy.tables": ["PlanTables", "Route"],
    "cascadeserve.cli": ["app", "main", "run"],
    "cascadeserve.cli.app": ["app", "console", "err_console", "print_json", "run"],
    "cascadeserve.cli.root": ["app", "console", "err_console", "invocation", "print_json", "set_invocation"],
}

# Packages that re-export names from their submodules: the objects must be the same.
REEXPORTS = {
    "cascadeserve.profile": [
        "cascadeserve.profile.certainty",
        "cascadeserve.profile.io",
        "cascadeserve.profile.profile",
        "cascadeserve.profile.runtime",
    ],
    "cascadeserve.policy": [
        "cascadeserve.policy.aimd",
        "cascadeserve.policy.batching",
        "cascadeserve.policy.forwarding",
        "cascadeserve.policy.gears",
        "cascadeserve.policy.qps",
        "cascadeserve.policy.routing",
        "cascadeserve.policy.schedule",
        "cascadeserve.policy.tables",
    ],
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_all_is_exactly_the_expected_list(module: str) -> None:
    mod = importlib.import_module(module)
    assert list(mod.__all__) == EXPECTED[module]


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_every_public_name_exists(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert missing == []


@pytest.mark.parametrize("package", sorted(REEXPORTS))
def test_package_reexports_are_the_submodule_objects(package: str) -> None:
    pkg = importlib.import_module(package)
    exported = set(pkg.__all__)
    seen: set[str] = set()
    for sub in REEXPORTS[package]:
        mod = importlib.import_module(sub)
        for name in mod.__all__:
            if name in exported:
                assert getattr(pkg, name) is getattr(mod, name), f"{package}.{name}"
                seen.add(name)
    assert seen == exported


def test_version() -> None:
    import cascadeserve

    assert cascadeserve.__version__ == "0.1.0"


@pytest.mark.parametrize("cls", [ProfileError, PlanError, TraceError, InfeasibleError])
def test_user_errors_derive_from_the_base_and_exit_2(cls: type[CascadeServeError]) -> None:
    assert issubclass(cls, CascadeServeError)
    assert cls.exit_code == 2


def test_located_error_rendering() -> None:
    assert str(ProfileError("bad", path="f.csv", line=3, column="certainty")) == "f.csv, line 3, column certainty: bad"
    assert str(PlanError("bad", path="p.json")) == "p.json: bad"
    assert str(TraceError("bad", line=2, column=7)) == "line 2, column 7: bad"
    assert str(ProfileError("bad")) == "bad"
    e = ProfileError("bad", path="f.csv", line=3)
    assert (e.message, e.path, e.line, e.column) == ("bad", "f.csv", 3, None)
