"""Clipper's serving layer over a real uvicorn server on 127.0.0.1: Clipper's REST API with exactly its documented
JSON, the V2 feedback endpoint, the prediction cache's ``cached`` flag and metrics, and model selection whose
state survives a server restart."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from tests.http.http_helpers import metric, toy_plan

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.clipper import DEADLINE_EXPLANATION, ClipperOptions
from cascadeserve.plan import Device, GearPlan, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import RuntimeOptions


@contextmanager
def clipper_server(
    profile: Profile, plan: GearPlan, clipper: ClipperOptions | None = None, cache_size: int | None = None
) -> Iterator[Server]:
    app = build_app(
        profile,
        plan,
        emulate=True,
        name="toy",
        runtime_options=RuntimeOptions(cache_size=cache_size),
        server_options=ServerOptions(stop_grace_s=2.0),
        clipper=clipper,
    )
    server = Server(app, "127.0.0.1", 0, grace_s=2.0).start()
    try:
        yield server
    finally:
        server.stop()


def _v2(
    url: str, sample: int, rid: str | None = None, client: httpx.Client | None = None, **params: object
) -> dict[str, Any]:
    """One V2 call; ``client``: a kept-alive connection (a loop of calls need not set one up per call)."""
    body: dict[str, object] = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [sample]}]}
    if rid is not None:
        body["id"] = rid
    if params:
        body["parameters"] = params
    r = (client or httpx).post(f"{url}/v2/models/toy/infer", json=body, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_clipper_predict_and_update_with_its_documented_json(toy_profile: Profile) -> None:
    with clipper_server(toy_profile, toy_plan(toy_profile), ClipperOptions(slo_ms=5000.0, default_output=-1)) as s:
        v2 = _v2(s.url, 5)
        want = v2["outputs"][0]["data"][0]
        r = httpx.post(f"{s.url}/toy/predict", json={"input": 5}, timeout=10)
        assert r.status_code == 200, r.text
        out = r.json()
        assert set(out) == {"query_id", "output", "default", "default_explanation"}
        assert out["output"] == want and out["default"] is False and out["default_explanation"] == ""
        assert isinstance(out["query_id"], int)
        r = httpx.post(f"{s.url}/toy/predict", json={"input_batch": [5, 6, 7]}, timeout=10)
        batch = r.json()["batch_predictions"]
        assert batch[0]["output"] == want and len({b["query_id"] for b in batch}) == 3
        # Clipper's update: {"uid", "input", "label"}
        label = int(toy_profile.labels[5])
        r = httpx.post(f"{s.url}/toy/update", json={"uid": 0, "input": 5, "label": float(label)}, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json() == {"accepted": 1, "correct": int(want == label)}
        assert httpx.post(f"{s.url}/toy/update", json={"uid": 0, "input": 999999, "label": 1}).status_code == 400
        assert httpx.post(f"{s.url}/toy/update", json={"uid": 0, "input": 9, "label": 1}).status_code == 404
        assert httpx.post(f"{s.url}/other/predict", json={"input": 5}).status_code == 404
        bad = httpx.post(f"{s.url}/toy/predict", json={"inputs": 5})
        assert bad.status_code == 400 and "input" in bad.json()["error"]


def test_clipper_default_output_when_no_stage_ran_by_the_slo(toy_profile: Profile) -> None:
    with clipper_server(toy_profile, toy_plan(toy_profile), ClipperOptions(slo_ms=0.001, default_output=-1)) as s:
        out = httpx.post(f"{s.url}/toy/predict", json={"input": 5}, timeout=10).json()
        assert out["output"] == -1 and out["default"] is True
        assert out["default_explanation"] == DEADLINE_EXPLANATION


def test_v2_feedback_updates_the_stage_window_once(toy_profile: Profile) -> None:
    with clipper_server(toy_profile, toy_plan(toy_profile)) as s:
        out = _v2(s.url, 11, rid="req-1")
        label, model = out["outputs"][0]["data"][0], out["outputs"][2]["data"][0]
        fb = f"{s.url}/v2/models/toy/feedback"
        assert httpx.post(fb, json={"id": "req-1", "label": "cat"}).status_code == 400
        r = httpx.post(fb, json={"id": "req-1", "label": label})
        assert r.status_code == 200 and r.json() == {"accepted": 1, "correct": 1}
        assert httpx.post(fb, json={"id": "req-1", "label": label}).status_code == 404  # given already
        assert httpx.post(fb, json={"id": "never", "label": 1}).status_code == 404
        _v2(s.url, 12, rid="a")
        _v2(s.url, 13, rid="b")
        r = httpx.post(fb, json={"ids": ["a", "b"], "labels": [0, 1]})
        assert r.status_code == 200 and r.json()["accepted"] == 2
        assert httpx.post(fb, json={"ids": ["x"], "labels": [0, 1]}).status_code == 400
        text = httpx.get(f"{s.url}/metrics").text
        assert metric(text, "cascadeserve_feedback_total") == 3
        layer = s.app.asgi.api.layer  # type: ignore[attr-defined]
        assert layer.outcomes.outcomes(model)[0][1] is True


def test_a_cached_answer_is_flagged_and_counted(toy_profile: Profile) -> None:
    with clipper_server(toy_profile, toy_plan(toy_profile), cache_size=16) as s:
        first = _v2(s.url, 3)
        again = _v2(s.url, 3)
        assert first["parameters"]["cached"] is False and again["parameters"]["cached"] is True
        assert again["outputs"][0]["data"] == first["outputs"][0]["data"]
        text = httpx.get(f"{s.url}/metrics").text
        assert metric(text, "cascadeserve_cache_hits_total") == 1
        assert metric(text, "cascadeserve_cache_misses_total") == 1


def test_exp3_selection_learns_and_survives_a_restart(toy_profile: Profile, tmp_path: Path) -> None:
    dev = (Device(name="d0", memory_mb=1000),)
    weak = fixed_plan(toy_profile, Cascade(("m0",), ()), dev)  # the primary: the least accurate model
    strong = fixed_plan(toy_profile, Cascade(("m2",), ()), dev)
    opts = ClipperOptions(alternatives=(("candidate", strong),), store_path=tmp_path / "sel.sqlite", eta=0.2, gamma=0.1)
    labels = toy_profile.labels
    with clipper_server(toy_profile, weak, opts) as s, httpx.Client(timeout=10) as client:
        for i in range(150):
            out = _v2(s.url, i, rid=f"r{i}", client=client, context="u1")
            client.post(f"{s.url}/v2/models/toy/feedback", json={"id": f"r{i}", "label": int(labels[i])})
        text = httpx.get(f"{s.url}/metrics").text
        learnt = s.app.asgi.api.layer.selector.state("u1")  # type: ignore[attr-defined]
        assert out["outputs"][2]["data"][0] in ("m0", "m2")
    acc = [float(np.mean(toy_profile.predictions[r] == labels)) for r in (0, 2)]
    assert acc[1] > acc[0]
    assert learnt.best() == 1 and learnt.updates == 150
    assert 'cascadeserve_selection_weight{alternative="candidate"}' in text
    with clipper_server(toy_profile, weak, opts) as s:  # restarted on the same SQLite file
        assert s.app.asgi.api.layer.selector.state("u1") == learnt  # type: ignore[attr-defined]
