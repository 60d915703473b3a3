"""A cascade is a dataflow, too: the paper's cascade over the digits family gives cascadeserve's answers, and
``deploy(backend="gears")`` recognises the shape and serves it on the gear runtime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.flow import Dataflow, FlowError, Table, cascade_answer, model, uncertain
from cascadeserve.flow.cascade import NotACascade, recognise
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve

pytest.importorskip("torch")

THRESHOLD = 0.6
N = 300  # validation images sent through (of 600)


@pytest.fixture(scope="module")
def family() -> dict[str, Any]:
    from cascadeserve.models import TorchAdapter
    from cascadeserve.models.families import digits

    models = {a: TorchAdapter(a, digits.load(a, seed=0, quick=True), threads=1) for a in ("logreg", "cnn-small")}
    _, _, xv, yv, _ = digits.split(0)
    scores = {a: m.predict(xv) for a, m in models.items()}
    prof = Profile.from_scores(
        "digits",
        [ModelProfile(a, 1.0, RuntimeCurve((1, 64), (0.1 * (i + 1), 1.0 * (i + 1)))) for i, a in enumerate(models)],
        yv,
        scores,
        device="test",
        source="tests/flow/test_cascade.py",
    )
    return {"models": models, "x": xv[:N], "y": yv[:N], "profile": prof, "full_x": xv}


def as_row(pixels: np.ndarray) -> np.ndarray:
    return np.asarray(pixels, dtype=np.float32)


NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def to_name(label: int, conf: float) -> str:
    return NAMES[label]


def cascade_flow(fam: dict[str, Any], *, post: bool = False) -> Dataflow:
    m1, m2 = fam["models"]["logreg"], fam["models"]["cnn-small"]
    flow = Dataflow([("pixels", np.ndarray)])
    img = flow.map(as_row)
    simple = img.map(model(m1))
    complex = simple.filter(uncertain(THRESHOLD)).map(model(m2))
    out = simple.join(complex, how="left").map(cascade_answer)
    flow.output = out.map(to_name) if post else out
    return flow


def test_the_flow_gives_the_cascades_answers(family: dict[str, Any]) -> None:
    flow = cascade_flow(family)
    table = Table([("pixels", np.ndarray)], list(family["x"]))
    local = flow.deploy()
    got = local.execute(table).result(60)
    local.close()
    assert len(got) == N and [r.id for r in got] == list(range(N))

    # cascadeserve's own cascade, served by the gear runtime with the same thresholds (a one-gear fixed plan)
    gears = flow.deploy("gears", profile=family["profile"])
    served = gears.execute(table).result(60)
    gears.close()
    assert [tuple(r) for r in served] == [tuple(r) for r in got]

    # and its offline evaluator agrees on the whole validation set
    full = Table([("pixels", np.ndarray)], list(family["full_x"]))
    ex = flow.deploy()
    labels = np.asarray(ex.execute(full).result(60).column("label"))
    ex.close()
    acc = Cascade(("logreg", "cnn-small"), (THRESHOLD,)).evaluate(family["profile"]).accuracy[0]
    assert float(np.mean(labels == family["profile"].labels)) == pytest.approx(float(acc), abs=1e-12)
    # some images went to the second stage, and not all
    assert 0 < int(np.sum(family["profile"].certainties[0] < THRESHOLD)) < len(labels)


def test_recognise_reads_the_shape_with_pre_and_post_processing(family: dict[str, Any]) -> None:
    flow = cascade_flow(family, post=True)
    shape = recognise(flow.graph())
    assert shape.cascade == Cascade(("logreg", "cnn-small"), (THRESHOLD,))
    assert [o.label for o in shape.pre] == ["map(as_row)"] and [o.label for o in shape.post] == ["map(to_name)"]
    gears = flow.deploy("gears", profile=family["profile"])
    out = gears.execute(Table([("pixels", np.ndarray)], list(family["x"][:20]))).result(60)
    gears.close()
    assert out.schema.names == ("to_name",) and all(v in NAMES for v in out.column("to_name"))


def test_other_shapes_are_not_cascades(family: dict[str, Any]) -> None:
    m1, m2 = family["models"]["logreg"], family["models"]["cnn-small"]

    def max_conf(
        pixels: np.ndarray,
        label: int,
        conf: float,
        pixels_right: Any,
        label_right: int | None,
        conf_right: float | None,
    ) -> int:
        return label

    flow = Dataflow([("pixels", np.ndarray)])
    s = flow.map(model(m1))
    flow.output = s.join(s.filter(uncertain(0.5)).map(model(m2)), how="left").map(max_conf)
    with pytest.raises(NotACascade, match="the output is not map\\(cascade_answer\\)"):
        recognise(flow.graph())
    with pytest.raises(FlowError, match="not map\\(cascade_answer\\)"):
        flow.deploy("gears", profile=family["profile"])

    flow = Dataflow([("pixels", np.ndarray)])
    s = flow.map(model(m1))
    flow.output = s.join(s.map(model(m2)), how="left").map(cascade_answer)
    with pytest.raises(NotACascade, match="stage 2 must read filter\\(uncertain\\(t\\)\\) of stage 1"):
        recognise(flow.graph())


def test_a_model_operator_from_a_models_yaml_entry(family: dict[str, Any], tmp_path: Any) -> None:
    import yaml

    cfg = tmp_path / "models.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "certainty": "margin",
                "threads": 1,
                "input": {"name": "pixels", "datatype": "FP32", "shape": [-1, 64]},
                "models": [
                    {
                        "name": "logreg",
                        "adapter": "torch",
                        "ref": "cascadeserve.models.families.digits:load",
                        "kwargs": {"arch": "logreg", "seed": 0, "quick": True},
                        "preprocess": {"dtype": "float32"},
                    }
                ],
            }
        )
    )
    fl = Dataflow([("pixels", np.ndarray)])
    fl.output = fl.map(model("logreg", config=cfg))
    ex = fl.deploy()
    out = ex.execute(Table([("pixels", np.ndarray)], list(family["x"][:50]))).result(60)
    ex.close()
    want = family["profile"].predictions[0][:50]
    assert out.schema.names == ("pixels", "label", "conf") and out.column("label") == want.tolist()
    np.testing.assert_allclose(out.column("conf"), family["profile"].certainties[0][:50], atol=1e-6)
    with pytest.raises(FlowError, match="model 'nope' is not in"):
        model("nope", config=cfg)


def test_the_gear_planner_plans_a_flow_cascade(family: dict[str, Any]) -> None:
    from cascadeserve.plan import SLO, Device
    from cascadeserve.planner import Planner

    flow = cascade_flow(family)
    gears = flow.deploy(
        "gears",
        profile=family["profile"],
        planner=Planner(n_ranges=2, levels=5, sim_requests=300),
        devices=[Device(name="d0", memory_mb=64), Device(name="d1", memory_mb=64)],
        slo=SLO(kind="p95_ms", value=50.0),
        max_qps=200.0,
    )
    try:
        assert len(gears.plan.gears) == 2  # type: ignore[attr-defined]
        assert set(gears.plan.models()) <= {"logreg", "cnn-small"}  # type: ignore[attr-defined]
        out = gears.execute(Table([("pixels", np.ndarray)], list(family["x"][:40]))).result(60)
    finally:
        gears.close()
    assert len(out) == 40 and all(0 <= v <= 9 for v in out.column("label"))
    assert float(np.mean(np.asarray(out.column("label")) == family["y"][:40])) > 0.85
