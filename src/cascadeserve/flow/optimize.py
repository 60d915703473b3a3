"""The optimiser: Cloudflow's dataflow rewrites (paper §4), each one a pass over the graph, each switchable.

Passes run in this order on the graph compiled from the user's flow:

1. **competitive execution** (:func:`compete`): every operator marked ``high_variance=True`` becomes ``replicas``
   copies of itself on the same inputs, joined by an ``anyof``; the executor takes whichever copy answers first.
2. **locality** (:func:`localize`): a ``lookup`` is fused with the operator after it (when that operator is its
   only consumer and has no other input), and the node is marked for *dynamic dispatch*: the executor runs it on
   a worker that has the looked-up key cached. A dispatched node always starts a task (nothing upstream is fused
   into it), which is the paper's split of the DAG just before the lookup.
3. **fusion** (:func:`fuse`): greedy maximal chains (a node whose only consumer has it as only input) become one
   ``Fuse`` task (an ``anyof`` is never fused: it waits for its first input, a task for all). Chains do not cross
   resource classes (``cpu``/``gpu``) unless ``fuse_across_resources``, and a batch-aware operator is fused only
   into chains of row-wise operators (map, filter, lookup), so batching still applies to the fused task.
4. **batching** (:func:`mark_batching`): a batch-aware node takes the rows of up to ``max_batch`` queued
   ``execute`` calls in one invocation, and its results are split back to their calls.

None of the passes changes an answer (a property test checks random flows): fusion runs the same operators in
the same order, copies of a deterministic operator give the same table, the batched rows of each call come back
in order, and dispatch only chooses where a task runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from cascadeserve.flow.combine import AnyOf
from cascadeserve.flow.graph import Graph, Node
from cascadeserve.flow.operators import Fuse, Lookup, Operator
from cascadeserve.flow.schema import FlowError

__all__ = ["ALL", "NONE", "Optimizations", "compete", "fuse", "localize", "mark_batching", "optimize"]


@dataclass(frozen=True)
class Optimizations:
    """Which rewrites run (all by default; each only touches the operators it applies to)."""

    fusion: bool = True
    fuse_across_resources: bool = False
    competitive: bool = True
    replicas: int = 3
    batching: bool = True
    max_batch: int = 10
    locality: bool = True

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise FlowError(f"optimizations: replicas is at least 1, not {self.replicas}")
        if self.max_batch < 1:
            raise FlowError(f"optimizations: max_batch is at least 1, not {self.max_batch}")


ALL = Optimizations()
NONE = Optimizations(fusion=False, competitive=False, batching=False, locality=False)


def compete(g: Graph, replicas: int) -> Graph:
    """Replace each high-variance operator by ``replicas`` copies under an ``anyof``."""
    if replicas <= 1 or not any(n.op is not None and n.op.high_variance for n in g.nodes):
        return g
    nodes: list[Node] = []
    where: dict[int, int] = {}  # old index -> index of the node that now stands for it
    for i, n in enumerate(g.nodes):
        ins = tuple(where[j] for j in n.inputs)
        if n.op is None or not n.op.high_variance:
            nodes.append(n.with_(inputs=ins))
            where[i] = len(nodes) - 1
            continue
        copies = []
        for _ in range(replicas):
            nodes.append(n.with_(inputs=ins))
            copies.append(len(nodes) - 1)
        op = n.op
        nodes.append(Node(AnyOf([(op.out, op.grouping)] * replicas), tuple(copies)))
        where[i] = len(nodes) - 1
    return Graph.compact(g.schema, nodes, where[g.output])


def _merge(g: Graph, head: int, chain: list[int], **flags: object) -> tuple[list[Node], dict[int, int]]:
    """Nodes with ``chain`` (head first) replaced by one Fuse node at the chain's last position."""
    members = set(chain)
    ops: list[Operator] = []
    for i in chain:
        op = g.nodes[i].op
        assert op is not None
        ops.extend(op.ops if isinstance(op, Fuse) else (op,))
    last = chain[-1]
    fused = g.nodes[last].with_(op=Fuse(ops), inputs=g.nodes[head].inputs, **flags)
    kept: list[Node] = []
    where: dict[int, int] = {}
    for i, n in enumerate(g.nodes):
        if i in members and i != last:
            continue
        where[i] = len(kept)
        kept.append(fused if i == last else n)
    for i in chain:
        where[i] = where[last]
    nodes = [n.with_(inputs=tuple(where[j] for j in n.inputs)) for n in kept]
    return nodes, where


def localize(g: Graph) -> Graph:
    """Fuse each lookup with its only consumer and mark the node for dispatch by the lookup's key."""
    while True:
        cons = g.consumers()
        done = True
        for i, n in enumerate(g.nodes):
            if not isinstance(n.op, Lookup) or n.dispatch is not None:
                continue
            c = cons[i]
            nxt = g.nodes[c[0]] if len(c) == 1 else None
            if nxt is not None and nxt.op is not None and nxt.inputs == (i,) and nxt.dispatch is None:
                nodes, _ = _merge(g, i, [i, c[0]], dispatch=n.op)
                g = Graph(g.schema, tuple(nodes))
            else:
                nodes = list(g.nodes)
                nodes[i] = n.with_(dispatch=n.op)
                g = Graph(g.schema, tuple(nodes))
            done = False
            break
        if done:
            return g


def _can_follow(chain_op: Operator, nxt: Operator, across: bool) -> bool:
    if nxt.arity != 1 or isinstance(nxt, AnyOf) or isinstance(chain_op, AnyOf):
        return False  # an anyof stays a task of its own: the executor waits for its first input only
    if not across and chain_op.resources != nxt.resources:
        return False
    batching = chain_op.batch or nxt.batch
    return not batching or (chain_op.row_wise and nxt.row_wise)


def fuse(g: Graph, across_resources: bool = False) -> Graph:
    """Greedy maximal chains into one Fuse task each."""
    while True:
        cons = g.consumers()
        merged = False
        for i, n in enumerate(g.nodes):
            if n.op is None:
                continue
            chain = [i]
            op = n.op
            cur = i
            while True:
                c = cons[cur]
                if len(c) != 1:
                    break
                nxt = g.nodes[c[0]]
                if nxt.op is None or nxt.inputs != (cur,) or nxt.dispatch is not None:
                    break
                if not _can_follow(op, nxt.op, across_resources):
                    break
                chain.append(c[0])
                op = Fuse([op, nxt.op])
                cur = c[0]
            if len(chain) > 1:
                nodes, _ = _merge(g, i, chain, dispatch=n.dispatch)
                g = Graph(g.schema, tuple(nodes))
                merged = True
                break
        if not merged:
            return g


def mark_batching(g: Graph, max_batch: int) -> Graph:
    """Batch-aware nodes take up to ``max_batch`` calls at once."""
    return Graph(
        g.schema,
        tuple(n.with_(batch=n.op is not None and n.op.batch, max_batch=max_batch) for n in g.nodes),
    )


def optimize(g: Graph, opts: Optimizations) -> Graph:
    if opts.competitive:
        g = compete(g, opts.replicas)
    if opts.locality:
        g = localize(g)
    if opts.fusion:
        g = fuse(g, opts.fuse_across_resources)
    if opts.batching:
        g = mark_batching(g, opts.max_batch)
    return g
