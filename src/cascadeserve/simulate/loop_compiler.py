"""The compiled loop's numba pipeline: numba's own, plus passes that drop the copies inlining leaves and read each
field of a record once.

Numba copies each helper of :mod:`cascadeserve.simulate.loop_queues` into its caller (``inline="always"``) by
binding every parameter to the caller's argument: ``param = arg``, one assignment per array per call. Numba counts
references on arrays, so each such copy costs an increment where it is made and a decrement where it dies: atomic
operations in calls the optimiser cannot see through, and its reference-count pruning leaves most of them in place.
``_ticks`` held 116 such copies, most on the per-event path (a free device's ``ready``, a batch's ``take``,
``exits`` and ``forward``, the arrivals' ``route``): SP4-sized runs took 2.2 ms each instead of 1.3 ms before the
loop was split into helpers, and 1.2 ms without the copies.

:class:`LoopCompiler` runs numba's nopython pipeline and, after type inference, :class:`ArrayCopyPropagation`: an
assignment ``a = b`` of one array (or tuple: a record of :mod:`cascadeserve.simulate.loop_records`) variable to
another, each assigned exactly once (the IR is in SSA form there) and of the same type, is removed and ``a`` read as
``b`` everywhere. ``b``'s definition dominates ``a``'s, so it dominates every use of ``a`` too, and ``b`` lives as
long as the longest of them: the same values, one reference fewer per copy (a record's copy counts one per array in
it). Then :class:`RecordFieldHoisting`: the loop's state travels as records, and each read of a field
(``st.rq``, in a helper copied into the loop once per call site and run once per event) would take a reference to
the array it reads, and drop it after; a record is immutable and an argument's variable is assigned once, so every
read of one field of an argument record is the value read at the function's entry, where the pass reads it once.
Nothing the loop computes changes.

numba is imported here, at the top: import this module only where numba is used (``loop.build_loop``).
"""

from __future__ import annotations

from typing import Any

from numba.core import ir, types
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.ir_utils import replace_vars
from numba.core.typed_passes import NopythonTypeInference

__all__ = ["ArrayCopyPropagation", "LoopCompiler", "RecordFieldHoisting"]


@register_pass(mutates_CFG=False, analysis_only=False)
class ArrayCopyPropagation(FunctionPass):
    """Reads each single-assignment copy of an array (or tuple) variable as its source, and drops the copy."""

    _name = "array_copy_propagation"

    def __init__(self) -> None:
        FunctionPass.__init__(self)

    def run_pass(self, state: Any) -> bool:
        blocks = state.func_ir.blocks
        typemap = state.typemap
        n_defs: dict[str, int] = {}
        for block in blocks.values():
            for stmt in block.body:
                if isinstance(stmt, ir.Assign):
                    n_defs[stmt.target.name] = n_defs.get(stmt.target.name, 0) + 1
        source: dict[str, ir.Var] = {}
        for block in blocks.values():
            for stmt in block.body:
                if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Var)):
                    continue
                dst, src = stmt.target.name, stmt.value.name
                kind = typemap.get(dst)
                if (
                    n_defs[dst] == 1
                    and n_defs.get(src) == 1
                    and isinstance(kind, types.Array | types.BaseTuple)
                    and kind == typemap[src]
                ):
                    source[dst] = stmt.value
        if not source:
            return False
        root: dict[str, ir.Var] = {}
        for dst, var in source.items():  # a copy of a copy reads the first source
            while var.name in source:
                var = source[var.name]
            root[dst] = var
        for block in blocks.values():
            block.body = [s for s in block.body if not (isinstance(s, ir.Assign) and s.target.name in root)]
        replace_vars(blocks, root)  # the next pass (numba's PreLowerStripPhis) rebuilds the IR's definitions
        return True


@register_pass(mutates_CFG=False, analysis_only=False)
class RecordFieldHoisting(FunctionPass):
    """Reads each field of a record argument once, at the function's entry, for every read of it in the function."""

    _name = "record_field_hoisting"

    def __init__(self) -> None:
        FunctionPass.__init__(self)

    def run_pass(self, state: Any) -> bool:
        blocks = state.func_ir.blocks
        typemap = state.typemap
        entry = blocks[min(blocks)]  # numba's entry block: the lowest label
        n_defs: dict[str, int] = {}
        for block in blocks.values():
            for stmt in block.body:
                if isinstance(stmt, ir.Assign):
                    n_defs[stmt.target.name] = n_defs.get(stmt.target.name, 0) + 1
        records = {
            stmt.target.name
            for stmt in entry.body
            if isinstance(stmt, ir.Assign)
            and isinstance(stmt.value, ir.Arg)
            and n_defs[stmt.target.name] == 1
            and isinstance(typemap[stmt.target.name], types.BaseNamedTuple)
        }
        first: dict[tuple[str, str], ir.Var] = {}  # (record, field): the one read kept
        hoisted: list[ir.Assign] = []
        same: dict[str, ir.Var] = {}  # every other read: the one kept
        for block in blocks.values():
            body = []
            for stmt in block.body:
                expr = stmt.value if isinstance(stmt, ir.Assign) else None
                if (
                    isinstance(expr, ir.Expr)
                    and expr.op == "getattr"
                    and expr.value.name in records
                    and n_defs[stmt.target.name] == 1
                ):
                    key = (expr.value.name, expr.attr)
                    if key in first:
                        same[stmt.target.name] = first[key]
                    else:
                        first[key] = stmt.target
                        hoisted.append(stmt)
                    continue
                body.append(stmt)
            block.body = body
        if not hoisted:
            return False
        # after the arguments' definitions (the entry block opens with them), before anything else
        at = max(
            k for k, stmt in enumerate(entry.body) if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Arg)
        )
        entry.body[at + 1 : at + 1] = hoisted
        replace_vars(blocks, same)
        return True


class LoopCompiler(CompilerBase):
    """numba's nopython pipeline with :class:`ArrayCopyPropagation` and then :class:`RecordFieldHoisting` after type
    inference."""

    def define_pipelines(self) -> list[Any]:
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(ArrayCopyPropagation, NopythonTypeInference)
        pm.add_pass_after(RecordFieldHoisting, ArrayCopyPropagation)
        pm.finalize()
        return [pm]
