"""Selection state in a real SQLite file: it survives a restart (a new store on the same file), per context."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadeserve.policy.selection import Pick, SelectionState
from cascadeserve.store import GLOBAL, MemorySelectionStore, Selector, SqliteSelectionStore


def test_sqlite_round_trip_and_restart(tmp_path: Path) -> None:
    path = tmp_path / "selection.sqlite"
    store = SqliteSelectionStore(path)
    assert store.get("digits", GLOBAL) is None
    store.put("digits", GLOBAL, SelectionState((0.0, -1.5), 7))
    store.put("digits", "user-1", SelectionState((-0.25, 0.0), 2))
    store.put("digits", "user-1", SelectionState((-0.5, 0.0), 3))  # an update replaces the row
    store.close()
    again = SqliteSelectionStore(path)  # the server restarted
    assert again.get("digits", GLOBAL) == SelectionState((0.0, -1.5), 7)
    assert again.get("digits", "user-1") == SelectionState((-0.5, 0.0), 3)
    assert again.contexts("digits") == [GLOBAL, "user-1"] and again.contexts("other") == []


def test_selector_feedback_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "sel.sqlite"
    sel = Selector("app", ["v1", "v2"], "exp3", SqliteSelectionStore(path), eta=0.1, gamma=0.0)
    for _ in range(5):
        sel.feedback_exp3(Pick(0, 0.5), correct=False, context="alice")
    learnt = sel.state("alice")
    assert learnt.best() == 1 and learnt.updates == 5
    restarted = Selector("app", ["v1", "v2"], "exp3", SqliteSelectionStore(path), eta=0.1, gamma=0.0)
    assert restarted.state("alice") == learnt
    assert restarted.state().best() == 1  # the global state learnt too
    assert restarted.state("bob") == restarted.state()  # an unknown context gets the global weights


def test_contexts_learn_separately() -> None:
    sel = Selector("app", ["a", "b"], "exp4", MemorySelectionStore(), eta=1.0)
    for _ in range(3):
        sel.feedback_exp4([1, 2], label=1, context="u1")  # b is wrong for u1
    for _ in range(4):  # u2's state is born from the global one (which u1 taught), then learns its own
        sel.feedback_exp4([1, 2], label=2, context="u2")  # a is wrong for u2
    assert sel.state("u1").best() == 0 and sel.state("u2").best() == 1
    assert sel.combine([1, 2], "u1").label == 1 and sel.combine([1, 2], "u2").label == 2
    with pytest.raises(ValueError, match="exp5"):
        Selector("app", ["a"], "exp5", MemorySelectionStore())  # type: ignore[arg-type]
