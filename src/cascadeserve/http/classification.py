"""Triton's classification extension: an output requested with ``parameters: {"classification": k}`` (HTTP) or
``InferRequestedOutput(name, class_count=k)`` (tritonclient, HTTP and gRPC) comes back as ``BYTES`` strings
``"<value>:<index>[:<label>]"`` instead of its numbers, shape ``[rows, n]``: the ``n`` highest-scoring classes of
each row, best first, ``<value>`` the score (written as C's ``%f``: six decimals), ``<index>`` the class and
``<label>`` its name where the models config names the classes (``labels:``; left out otherwise), as Triton does.

A cascade answers each row with one class, its answering model's top one, and the certainty it had in it: that is
what is scored. So the output that classifies is ``certainty`` (a row's ``"0.930000:2:sports"``: class 2, named
``sports``, with certainty 0.93), and a row holds one class: ``k`` above 1 gives that one, as Triton gives no more
classes than the output holds. ``k`` must be a non-negative integer; 0 asks for the plain output (tritonclient's
``class_count=0``, its default). Classifying another output (``label``, ``model``...) is refused (400 naming it),
and so is a classified output written to shared memory, as Triton refuses both at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from cascadeserve.http.v2 import OutputTensor, ProtocolError

__all__ = ["CLASSIFIED", "check_classes", "classified"]

CLASSIFIED = "certainty"
"""The one output that classifies: each row's score of the class it was answered with."""


def check_classes(classes: Mapping[str, int]) -> None:
    """Refuse (400) classification asked of an output other than :data:`CLASSIFIED`."""
    for name in classes:
        if name != CLASSIFIED:
            raise ProtocolError(
                f"outputs: output {name!r} cannot be classified: classification is served for output "
                f"{CLASSIFIED!r} only (each row's score of the class it was answered with)"
            )


def classified(
    outputs: Sequence[OutputTensor],
    classes: Mapping[str, int],
    labels: Mapping[int, str] | None,
    label_values: np.ndarray | Sequence[int],
) -> list[OutputTensor]:
    """``outputs`` with each one ``classes`` names (:data:`CLASSIFIED` only, :func:`check_classes`) replaced by its
    classification: per row ``"<certainty>:<label>[:<class name>]"``, shape ``[rows, 1]``. ``label_values``: each
    row's label (the ``label`` output's data)."""
    if not classes:
        return list(outputs)
    out = []
    for o in outputs:
        if classes.get(o.name, 0) < 1:
            out.append(o)
            continue
        strings = []
        for score, label in zip(np.asarray(o.data, dtype=np.float32).tolist(), list(label_values), strict=True):
            text = f"{score:f}:{label}"
            name = labels.get(label) if labels is not None else None
            strings.append(text if name is None else f"{text}:{name}")
        out.append(OutputTensor(o.name, "BYTES", strings, o.parameters, (len(strings), 1)))
    return out
