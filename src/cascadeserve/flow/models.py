"""Model operators and the two pieces of a cascade written as a flow.

* :func:`model` makes a ``map`` operator from a model: a :class:`~cascadeserve.models.Model` adapter
  (``CallableAdapter``, ``TorchAdapter``, ...), a plain ``scores = f(batch)`` callable, or the name of an entry
  in a ``models.yaml`` (``model("cnn", config="models.yaml")``, read by the runtime's
  :func:`~cascadeserve.runtime.load_model_config`). It reads one input column (``input=``, default the first),
  stacks the rows of a batch into one array exactly as the runtime's consumer does (``np.asarray`` of the
  payloads), calls the model once per batch, and writes ``label: int`` (the top class) and ``conf: float`` (the
  certainty function's value, ``margin`` by default: the profile's and the runtime's function) into the row,
  keeping the other columns. It is batch-aware: the executor batches rows across ``execute`` calls.
* :func:`uncertain` is the cascade's forwarding rule as a filter: it keeps the rows the stage does **not**
  answer, deciding with :func:`cascadeserve.policy.forwarding.sure_mask`, the exit rule every engine uses.
* :func:`cascade_answer` is the join's reduction: the answer of the last stage that ran (the right-most
  ``label``/``conf`` pair that is not ``None``), which is what the cascade runtime answers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.flow.functions import Bound
from cascadeserve.flow.schema import Column, FlowError, FlowTypeError, Schema, accepts, type_name
from cascadeserve.policy.forwarding import sure_mask
from cascadeserve.profile import CertaintyFn, certainty_function

__all__ = ["CascadeAnswer", "ModelOp", "Uncertain", "cascade_answer", "model", "uncertain"]


class ModelOp:
    """A model as a (batch-aware) map operator; see :func:`model`."""

    def __init__(
        self,
        fn: Callable[[Any], Any],
        name: str,
        *,
        input: str | None = None,
        label: str = "label",
        conf: str = "conf",
        certainty: str | CertaintyFn = "margin",
        resources: str = "cpu",
    ) -> None:
        self.fn = fn
        self.name = name
        self.__name__ = name
        self.input = input
        self.label, self.conf = label, conf
        self.certainty_name = certainty if isinstance(certainty, str) else getattr(certainty, "__name__", "custom")
        self.certainty = certainty_function(certainty)
        self.resources = resources
        self._loaded = False

    def load(self) -> None:
        if not self._loaded:
            loader = getattr(self.fn, "load", None)
            if callable(loader):
                loader()
            self._loaded = True

    def scores(self, batch: np.ndarray) -> np.ndarray:
        self.load()
        return np.asarray(self.fn(batch))

    def predict(self, values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Labels and certainties of a batch of input values (the runtime's ``ThreadDevice`` computation)."""
        if not values:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        scores = self.scores(np.asarray(values))
        if scores.ndim != 2 or scores.shape[0] != len(values):
            raise FlowError(f"model {self.name!r}: expected scores [{len(values)}, classes], got {list(scores.shape)}")
        return np.asarray(scores.argmax(axis=1), dtype=np.int64), np.asarray(self.certainty(scores), dtype=np.float64)

    def bind(self, schema: Schema, op: str) -> Bound:
        if not len(schema):
            raise FlowTypeError(f"{op}: a model needs an input column")
        k = schema.index(self.input) if self.input is not None else 0
        cols = [c for c in schema if c.name not in (self.label, self.conf)]
        out = Schema([*cols, Column(self.label, int), Column(self.conf, float)])
        keep = [schema.index(c.name) for c in cols]

        def call(*columns: list[Any]) -> list[Any]:
            labels, certs = self.predict(columns[k])
            rows = list(zip(*[columns[i] for i in keep], strict=True)) if keep else [()] * len(labels)
            return [(*r, int(lab), float(c)) for r, lab, c in zip(rows, labels.tolist(), certs.tolist(), strict=True)]

        return Bound(call, out, self.name, self.resources, batch=True)

    def __repr__(self) -> str:
        return f"model({self.name!r})"


def model(
    ref: Any,
    *,
    config: str | Path | None = None,
    input: str | None = None,
    label: str = "label",
    conf: str = "conf",
    certainty: str | CertaintyFn | None = None,
    resources: str = "cpu",
    name: str | None = None,
) -> ModelOp:
    """A model operator: ``ref`` is an adapter or ``scores = f(batch)`` callable, or with ``config=`` the name of
    a ``models.yaml`` entry (whose ``certainty`` then applies unless ``certainty=`` is given)."""
    if config is not None:
        from cascadeserve.runtime import load_model_config  # deferred: loading a config imports the frameworks

        if not isinstance(ref, str):
            raise FlowError("model(..., config=...): name the model with a str")
        cfg = load_model_config(config)
        if ref not in cfg.models:
            raise FlowError(f"model {ref!r} is not in {config} (it has {', '.join(cfg.models)})")
        return ModelOp(
            cfg.models[ref], ref, input=input, label=label, conf=conf,
            certainty=certainty or cfg.certainty, resources=resources,
        )  # fmt: skip
    if not callable(ref):
        raise FlowError(f"model: expected an adapter or a callable, got {type(ref).__name__}")
    nm = name or str(getattr(ref, "name", None) or getattr(ref, "__name__", "model"))
    return ModelOp(ref, nm, input=input, label=label, conf=conf, certainty=certainty or "margin", resources=resources)


class Uncertain:
    """The forwarding rule as a filter: keep the rows whose certainty is below the stage's threshold."""

    def __init__(self, threshold: float, conf: str = "conf") -> None:
        self.threshold = float(threshold)
        self.conf = conf
        self.__name__ = f"uncertain({self.threshold:g})"

    def bind(self, schema: Schema, op: str) -> Bound:
        k = schema.index(self.conf)
        t = schema.column(self.conf).type
        if not accepts(float, t):
            raise FlowTypeError(f"{op}: column {self.conf!r} is {type_name(t)}, not float")

        def call(*columns: list[Any]) -> list[Any]:
            sure = sure_mask(np.asarray(columns[k], dtype=np.float64), self.threshold)
            return [not bool(s) for s in sure.tolist()]

        return Bound(call, None, self.__name__, batch=True)


def uncertain(threshold: float, conf: str = "conf") -> Uncertain:
    """Filter predicate: the rows a cascade stage with this threshold does not answer."""
    return Uncertain(threshold, conf)


class CascadeAnswer:
    """Reduce a left-joined row of stage answers to the answer of the last stage that ran."""

    __name__ = "cascade_answer"

    def __init__(self, label: str = "label", conf: str = "conf") -> None:
        self.label, self.conf = label, conf

    def _pairs(self, schema: Schema, op: str) -> list[tuple[int, int]]:
        def family(base: str) -> list[int]:
            return [i for i, c in enumerate(schema) if c.name == base or c.name.startswith(base + "_right")]

        labels, confs = family(self.label), family(self.conf)
        if not labels or len(labels) != len(confs):
            raise FlowTypeError(
                f"{op}: expected matching {self.label!r}/{self.conf!r} columns of each joined stage in {schema}"
            )
        return list(zip(labels, confs, strict=True))

    def bind(self, schema: Schema, op: str) -> Bound:
        pairs = self._pairs(schema, op)

        def call(*columns: list[Any]) -> list[Any]:
            n = len(columns[0]) if columns else 0
            out: list[Any] = []
            for r in range(n):
                ans = None
                for li, ci in pairs:
                    if columns[li][r] is not None:
                        ans = (columns[li][r], columns[ci][r])
                if ans is None:
                    raise FlowError(f"{op}: row {r} has no stage answer")
                out.append(ans)
            return out

        return Bound(call, Schema([(self.label, int), (self.conf, float)]), self.__name__, batch=True)


cascade_answer = CascadeAnswer()
