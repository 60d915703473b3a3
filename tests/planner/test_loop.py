"""Algorithm 1's control flow on fake submodules: ok goes forward, errors go back, it terminates."""

from __future__ import annotations

import pytest

from cascadeserve.planner import LoopInfeasible, Step, run_loop


class Fake:
    """A submodule that answers from a script, then ok/unchanged forever."""

    def __init__(self, name: str, script: list[Step[str]], log: list[tuple[str, str | None]]) -> None:
        self.name = name
        self.script = list(script)
        self.log = log

    def __call__(self, error: str | None) -> Step[str]:
        self.log.append((self.name, error))
        return self.script.pop(0) if self.script else Step()


def test_ok_goes_forward_and_a_quiet_cycle_converges() -> None:
    log: list[tuple[str, str | None]] = []
    mods = [Fake(n, [Step(changed=True)], log) for n in "ABCD"]
    res = run_loop(mods)
    assert res.converged and not res.hit_cap
    # one changing cycle, then one quiet cycle of four calls
    assert [n for n, _ in log] == list("ABCD") + list("ABCD")
    assert res.calls == [2, 2, 2, 2]
    assert res.cycles == 2


def test_error_goes_back_and_resolution_goes_forward() -> None:
    log: list[tuple[str, str | None]] = []
    a = Fake("A", [Step(changed=True)], log)
    b = Fake("B", [Step(changed=True), Step(changed=True)], log)  # resolves the error it gets
    c = Fake("C", [Step(changed=True), Step("too slow"), Step(changed=True)], log)  # passes D's error back once
    d = Fake("D", [Step("too slow")], log)
    res = run_loop([a, b, c, d], keep_trail=True)
    assert res.converged
    assert log[:8] == [
        ("A", None),
        ("B", None),
        ("C", None),
        ("D", None),
        ("C", "too slow"),  # D's error goes back to C ...
        ("B", "too slow"),  # ... which passes it back to B, which resolves it
        ("C", None),  # ok goes forward again
        ("D", None),
    ]
    assert [ok for _, ok in res.trail[:6]] == [True, True, True, False, False, True]


def test_an_error_reaching_the_first_submodule_is_final() -> None:
    log: list[tuple[str, str | None]] = []
    mods = [
        Fake("A", [Step(changed=True), Step("infeasible")], log),
        Fake("B", [Step(changed=True), Step("no cheaper cascade")], log),
        Fake("C", [Step("no placement")], log),
    ]
    with pytest.raises(LoopInfeasible) as info:
        run_loop(mods)
    assert info.value.error == "infeasible"
    assert [n for n, _ in log] == ["A", "B", "C", "B", "A"]
    assert info.value.result.iterations == 5


def test_the_iteration_cap_is_reported() -> None:
    class Restless:
        def __call__(self, error: str | None) -> Step[str]:
            return Step(changed=True)

    res = run_loop([Restless(), Restless()], max_iterations=25)
    assert res.hit_cap and not res.converged
    assert res.iterations == 25


def test_no_submodules_is_an_error() -> None:
    with pytest.raises(ValueError):
        run_loop([])
