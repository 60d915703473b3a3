"""Devices: where batches run. A device runs one batch at a time (the consumer guarantees it).

* :class:`EmulatedDevice` waits the profiled runtime of the model at the batch's size on the injected clock (for an
  LLM stage with token costs, what the batch's longest prompt and output cost: :mod:`cascadeserve.profile.tokens`),
  then answers with the recorded prediction and certainty of each validation sample sent. It is how a 16-device
  plan runs on a 2-core machine and, on a virtual clock, the reference simulator
  (:mod:`cascadeserve.simulate.reference`).
  Its answers are marked ``emulated``.
* :class:`ThreadDevice` runs real models on one worker thread per device. Threads, not processes, because the
  heavy work of the frameworks we target (numpy, torch, onnxruntime) runs in C with the GIL released, so a thread
  per device gives real parallelism without pickling every batch across a process boundary; a model in pure
  Python would serialise on the GIL, and for such models a process per device is the right tool (not built
  yet; docs/plans-that-hold.md says what GIL-bound models cost). The thread calls the model and the certainty
  function; the event loop never runs model code, so a stalled model holds only its own device
  (:mod:`cascadeserve.runtime.worker`). For a batch expected to take under :data:`INLINE_S` (the model's last
  batch, scaled to the batch's size) the loop waits for the thread in place, for at most :data:`IN_PLACE_S`: the
  hop's cost stays small for a cheap model, and an overrun (a stall) is awaited like any other batch.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from cascadeserve.models.base import Generated, TextOutput, batch_rows
from cascadeserve.plan import GearPlan
from cascadeserve.profile import CertaintyFn, Profile, certainty_function
from cascadeserve.profile.host import busy_at, contended, host_groups, host_peers, host_share
from cascadeserve.profile.slowdown import Slowdowns
from cascadeserve.profile.spread import SPREAD_DRAWS, spread_draws
from cascadeserve.profile.tokens import TokenTables, token_tables
from cascadeserve.runtime.clock import Clock
from cascadeserve.runtime.worker import Worker

__all__ = [
    "BatchOutput",
    "Device",
    "EmulatedDevice",
    "HostLoad",
    "Inputs",
    "ModelFn",
    "ThreadDevice",
    "batch_of",
]

ModelFn = Callable[[Any], "np.ndarray | Generated"]  # a batch's Inputs -> scores (or generated answers)
"""A model: ``scores[n, classes] = f(batch[n, ...])``, or a generative stage's :class:`Generated` answers."""

# The simulator looks runtimes up in a table of this many batch sizes; the emulated device uses the same table
# so that both compute bit-identical batch durations.
_TABLE_BATCH = 4096


@dataclass(frozen=True, slots=True)
class BatchOutput:
    labels: np.ndarray  # int64 [n]
    certainties: np.ndarray  # float64 [n]
    # Rows whose scores were not finite (NaN, Inf): garbage from the model, failed (or answered by an earlier
    # stage) rather than passed through the cascade as if they meant something. None: every row is sound.
    garbage: np.ndarray | None = None  # bool [n]
    # A generative stage's answers, one per row (labels are then 0): what the front end returns as text
    outputs: tuple[TextOutput, ...] | None = None
    # the share of the host's other devices that were running a batch when this one started (profile/host.py)
    host_share: float = 0.0


Inputs = np.ndarray | Mapping[str, np.ndarray]
"""A batch's input: one array whose first dimension is the batch, or for a model that takes several input tensors a
mapping of each input's name to such an array."""


def batch_of(payloads: Sequence[Any]) -> Inputs:
    """The model's input for the rows ``payloads``: their array, or where each row is a mapping of input name to
    array (a model that takes several input tensors), each name's rows stacked."""
    if payloads and isinstance(payloads[0], Mapping):
        return {k: np.stack([p[k] for p in payloads]) for k in payloads[0]}
    return np.asarray(payloads)


class Device(Protocol):
    """Something that runs one batch of one model row and returns labels and certainties."""

    name: str
    emulated: bool

    async def run(self, row: int, inputs: Inputs) -> BatchOutput: ...

    def close(self) -> None: ...


class HostLoad:
    """The devices of one host and which are running a batch: emulated devices read it to apply the contention rule
    (:func:`cascadeserve.profile.host.contended`, a batch slower by its model's ``busy_factor`` as the other
    devices are busy); every device reports with each batch how busy the host was when it started (calibration)."""

    def __init__(self, devices: int, upstream: Sequence[bool] = ()) -> None:
        self.devices = devices
        # which host each device is on: an upstream stage's device is a host of its own (no contention with ours)
        self.group = host_groups(list(upstream) or [False] * devices)
        self.busy = np.zeros(devices, dtype=bool)  # per device rank: running a batch from starts to ends
        self.starts = np.zeros(devices)
        self.ends = np.zeros(devices)

    @classmethod
    def of(cls, plan: GearPlan) -> HostLoad:
        """The plan's devices, in rank order: this host's, and each upstream stage's on a host of its own."""
        return cls(len(plan.devices), [d.upstream is not None for d in plan.devices])

    def others(self, order: int, now: float) -> int:
        """How many devices other than ``order`` on its host are running a batch at ``now`` (the rule's ``k``)."""
        return busy_at(now, self.busy, self.starts, self.ends, order, self.group)

    def start(self, order: int, now: float, end: float) -> None:
        """Device ``order`` runs a batch from ``now`` to ``end`` (``inf`` when not known in advance)."""
        self.busy[order], self.starts[order], self.ends[order] = True, now, end

    def stop(self, order: int) -> None:
        self.busy[order] = False

    def share(self, order: int, others: int) -> float:
        return host_share(others, host_peers(self.group, order))


class EmulatedDevice:
    """Waits the profiled batch runtime, answers from the profile's records (``inputs`` are sample indices)."""

    emulated = True

    def __init__(
        self,
        name: str,
        profile: Profile,
        clock: Clock,
        *,
        order: int = 0,
        slowdowns: Slowdowns | None = None,
        overhead_s: float = 0.0,
        host: HostLoad | None = None,
    ) -> None:
        self.name = name
        self.host = host  # shared with the host's other emulated devices (contention); None: alone
        # a fixed cost per batch on top of the profiled runtime (the plan's batch_overhead_ms, which the reference
        # simulator charges; a served emulation leaves it at 0, its host pays its own)
        self.overhead_s = overhead_s
        self.slowdowns = slowdowns or None  # fault hook: this device's runtime factor over time (as the simulator)
        self.order = order  # rank among devices: breaks ties between batches ending at one instant
        self.profile = profile
        self.clock = clock
        self._tables = [m.runtime.table(_TABLE_BATCH) for m in profile.models]
        self._tokens: dict[int, TokenTables | None] = {}  # token tables by size (profile/tokens.py), when needed
        # each batch's factor beyond its rule, drawn in turn from this device's table (profile/spread.py), as the
        # compiled simulator loop draws them
        self._spread = spread_draws(profile, order)
        self._started = 0

    def seconds(self, row: int, samples: np.ndarray) -> float:
        """What a batch of the validation samples ``samples`` costs on model row ``row``: the profiled runtime of its
        size, or with token costs what its longest prompt and output cost (the simulator's rule and tables)."""
        size = len(samples)
        tab = self._tables[row]
        table = _TABLE_BATCH if size < len(tab) else 2 * size
        if table not in self._tokens:
            self._tokens[table] = token_tables(self.profile.models, self.profile.n_samples, table)
        tok = self._tokens[table]
        if tok is not None:
            return tok.seconds(row, samples) + self.overhead_s
        return (tab[size] if size < len(tab) else self.profile.models[row].runtime.seconds(size)) + self.overhead_s

    async def run(self, row: int, inputs: Inputs) -> BatchOutput:
        if isinstance(inputs, Mapping):
            raise TypeError("an emulated device takes the validation samples' indices, not named input tensors")
        now = self.clock.now()
        secs = self.seconds(row, inputs)
        host = self.host
        others = 0
        if host is not None:  # slower while the host's other devices are busy (what the simulator charges too)
            others = host.others(self.order, now)
            secs = contended(secs, self.profile.models[row].busy_factor, host.share(self.order, others))
        if self._spread is not None:
            secs *= self._spread[row, self._started % SPREAD_DRAWS]
            self._started += 1
        if self.slowdowns is not None:
            secs *= self.slowdowns.factor(self.name, now, self.profile.models[row].name)
        if host is not None:
            host.start(self.order, now, now + secs)
        try:
            await self.clock.sleep_until(now + secs, order=self.order)
        finally:
            if host is not None:
                host.stop(self.order)
        share = host.share(self.order, others) if host is not None else 0.0
        preds, certs = self.profile.predictions[row, inputs], self.profile.certainties[row, inputs]
        return BatchOutput(preds, certs, host_share=share)

    def close(self) -> None:
        return None


def _generated(result: Generated, n: int) -> BatchOutput:
    """A generative stage's batch: its answers ride along, its certainties drive the cascade (NaN: garbage)."""
    certs = np.asarray(result.certainties, dtype=np.float64)
    if len(result.outputs) != n or certs.shape != (n,):
        raise ValueError(f"expected {n} answers and certainties, got {len(result.outputs)} and {list(certs.shape)}")
    sound = np.isfinite(certs)
    return BatchOutput(np.zeros(n, dtype=np.int64), certs, None if sound.all() else ~sound, tuple(result.outputs))


# A batch expected to take less than this is waited for in place (the loop blocked on the worker's lock, the GIL
# released), not through the loop. An asynchronous hop to the thread and back (a wake-up of the loop through its
# self-pipe, callback hops) cost ~130 µs of wall time per call on the 2-core CI-class machine, several times what
# such a model computes; the in-place hand-off ~17 µs. The expectation is the model's last batch scaled up linearly
# by size, so a model is never waited for in place before it has run once, and one slow batch sends the next back
# to the asynchronous wait.
INLINE_S = 50e-6
# The longest the loop waits in place: past it, the batch is awaited asynchronously (a stall, or the machine
# preempted the worker), so no model holds the loop longer than this, whatever it does.
IN_PLACE_S = 1e-3


class ThreadDevice:
    """Runs real models on a dedicated worker thread (one batch at a time); waits in place for cheap ones."""

    emulated = False

    def __init__(
        self,
        name: str,
        models: Mapping[int, ModelFn],
        certainty: str | CertaintyFn = "margin",
        *,
        slowdowns: Slowdowns | None = None,
        clock: Clock | None = None,
        model_names: Mapping[int, str] | None = None,
        host: HostLoad | None = None,
        order: int = 0,
    ) -> None:
        self.name = name
        self.host = host  # the host's devices, to tell how loaded it was when a batch started (calibration)
        self.order = order
        self.models = dict(models)
        self.certainty = certainty_function(certainty)
        # fault hook (serve --slowdown): times on ``clock``; a slowed batch holds the thread (factor - 1) x longer
        self.slowdowns = slowdowns or None
        self.clock = clock
        self.model_names = dict(model_names or {})
        if self.slowdowns is not None and self.clock is None:
            raise ValueError(f"device {name!r}: slowdowns need the runtime's clock")
        if self.slowdowns is not None and any(s.factor < 1 for s in self.slowdowns.steps):
            raise ValueError(f"device {name!r}: a real model cannot run faster than it does (slowdown factor < 1)")
        self._worker = Worker(f"cascadeserve-{name}")
        self._last: dict[int, tuple[float, int]] = {}  # row -> (seconds, rows) of its last batch's model call

    def _inline(self, row: int, inputs: Inputs) -> bool:
        last = self._last.get(row)
        if last is None or self.slowdowns is not None:  # a slowed batch sleeps: never on the loop
            return False
        return last[0] * max(1.0, batch_rows(inputs) / last[1]) < INLINE_S

    def _compute(self, row: int, inputs: Inputs) -> BatchOutput:
        started = time.perf_counter()
        n = batch_rows(inputs)
        result = self.models[row](inputs)
        self._last[row] = (time.perf_counter() - started, max(n, 1))
        if self.slowdowns is not None and self.clock is not None:
            f = self.slowdowns.factor(self.name, self.clock.now(), self.model_names.get(row))
            if f > 1:
                time.sleep((f - 1.0) * (time.perf_counter() - started))
        outputs = None
        if isinstance(result, Generated):
            if result.scores is None:
                return _generated(result, n)
            outputs, result = tuple(result.outputs), result.scores  # a scoring stage that counts its tokens
            if len(outputs) != n:
                raise ValueError(f"expected {n} answers with the scores, got {len(outputs)}")
        scores = np.asarray(result)
        if scores.ndim != 2 or scores.shape[0] != n:
            raise ValueError(f"expected scores of shape [{n}, classes], got {list(scores.shape)}")
        if scores.dtype.kind not in "fiub":
            raise ValueError(f"expected numeric scores, got dtype {scores.dtype}")
        with np.errstate(invalid="ignore", over="ignore"):  # garbage rows are flagged below, never trusted
            certs = np.asarray(self.certainty(scores), dtype=np.float64)
        if certs.shape != (n,):
            raise ValueError(f"the certainty function gave shape {list(certs.shape)}, expected [{n}]")
        sound = np.isfinite(certs)
        if scores.dtype.kind == "f":
            sound &= np.isfinite(scores).all(axis=1)
        garbage = None if sound.all() else ~sound
        return BatchOutput(np.asarray(scores.argmax(axis=1), dtype=np.int64), certs, garbage, outputs)

    async def run(self, row: int, inputs: Inputs) -> BatchOutput:
        host = self.host
        if host is None:
            return await self._call(row, inputs)
        now = time.monotonic()
        others = host.others(self.order, now)
        host.start(self.order, now, math.inf)  # the end is not known before it comes
        try:
            out = await self._call(row, inputs)
        finally:
            host.stop(self.order)
        return dataclasses.replace(out, host_share=host.share(self.order, others))

    async def _call(self, row: int, inputs: Inputs) -> BatchOutput:
        call = self._worker.submit(lambda: self._compute(row, inputs))
        return await call.wait(IN_PLACE_S if self._inline(row, inputs) else 0.0)

    def close(self) -> None:
        self._worker.close()
