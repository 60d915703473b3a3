"""The compiled loop's numba pipeline (simulate/loop_compiler.py): the array copies that inlining leaves are gone, a
record argument's fields are read once each, and what the code computes is not changed."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

numba = pytest.importorskip("numba")


def _push(buf: Any, nxt: Any, i: int) -> None:  # a helper over arrays, as loop_queues' are
    nxt[i] = buf[i] + 1.0


def _caller(buf: Any, nxt: Any) -> float:
    total = 0.0
    for i in range(buf.shape[0]):
        push(buf, nxt, i)  # type: ignore[name-defined]  # noqa: F821  # bound below, as compile_calling_kernels does
        total += nxt[i]
    return total


def _build(pipeline_class: type | None) -> Any:
    import types

    push = numba.njit(inline="always")(_push)
    glb = {**_caller.__globals__, "push": push}
    fn = types.FunctionType(_caller.__code__, glb, "_caller")
    options = {} if pipeline_class is None else {"pipeline_class": pipeline_class}
    return numba.njit(**options)(fn)


def test_the_pass_drops_inlined_array_copies_and_keeps_the_results(monkeypatch: pytest.MonkeyPatch) -> None:
    from numba.core import ir, types

    from cascadeserve.simulate.loop_compiler import ArrayCopyPropagation, LoopCompiler

    left: list[int] = []  # array copies left in _caller's typed IR after the pass
    run_pass = ArrayCopyPropagation.run_pass

    def counting(self: Any, state: Any) -> bool:
        changed = run_pass(self, state)
        left.append(
            sum(
                isinstance(s, ir.Assign)
                and isinstance(s.value, ir.Var)
                and isinstance(state.typemap.get(s.target.name), types.Array)
                for block in state.func_ir.blocks.values()
                for s in block.body
            )
        )
        assert changed  # the inlined helper's two array parameters were copies
        return bool(changed)

    monkeypatch.setattr(ArrayCopyPropagation, "run_pass", counting)
    buf = np.arange(10.0)
    plain, passed = _build(None), _build(LoopCompiler)
    a, b = np.zeros(10), np.zeros(10)
    assert plain(buf, a) == passed(buf, b)
    assert np.array_equal(a, b)
    assert left == [0]


class _Rec(NamedTuple):  # a record of the loop's kind: arrays and a scalar
    buf: Any
    out: Any
    scale: float


def _bump(rec: Any, i: int) -> None:  # a helper over a record, as loop_queues' are
    rec.out[i] = rec.buf[i] * rec.scale


def _over_record(rec: Any) -> float:
    total = 0.0
    for i in range(rec.buf.shape[0]):
        bump(rec, i)  # type: ignore[name-defined]  # noqa: F821  # bound below, as compile_calling_kernels does
        total += rec.out[i]
    return total


def test_the_record_pass_reads_each_field_once_and_keeps_the_results(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from numba.core import ir

    from cascadeserve.simulate.loop_compiler import LoopCompiler, RecordFieldHoisting

    reads: list[list[str]] = []  # the fields read from the record argument, in _over_record's typed IR after the pass
    run_pass = RecordFieldHoisting.run_pass

    def counting(self: Any, state: Any) -> bool:
        changed = run_pass(self, state)
        reads.append(
            sorted(
                s.value.attr
                for block in state.func_ir.blocks.values()
                for s in block.body
                if isinstance(s, ir.Assign)
                and isinstance(s.value, ir.Expr)
                and s.value.op == "getattr"
                and s.value.value.name == "rec"
            )
        )
        return bool(changed)

    monkeypatch.setattr(RecordFieldHoisting, "run_pass", counting)

    def build(pipeline_class: type | None) -> Any:
        bump = numba.njit(inline="always")(_bump)
        fn = types.FunctionType(_over_record.__code__, {**_over_record.__globals__, "bump": bump}, "_over_record")
        options = {} if pipeline_class is None else {"pipeline_class": pipeline_class}
        return numba.njit(**options)(fn)

    plain, passed = build(None), build(LoopCompiler)
    a = _Rec(np.arange(10.0), np.zeros(10), 1.5)
    b = _Rec(np.arange(10.0), np.zeros(10), 1.5)
    assert plain(a) == passed(b) == 1.5 * 45.0
    assert np.array_equal(a.out, b.out)
    assert reads == [["buf", "out", "scale"]]  # each once (the loop reads buf and out on every turn, twice in all)
