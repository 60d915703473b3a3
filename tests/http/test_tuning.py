"""``serve --tune`` over a real uvicorn server on 127.0.0.1: labels from the feedback endpoint fill the tuner's
label windows (only requests whose record is whole), threshold changes show in ``/metrics`` and in
``GET /v2/cascade/plan``, and that plan can be PUT back as it is."""

from __future__ import annotations

import time

import httpx
from tests.http.http_helpers import ADMIN, metric, serving, toy_plan

from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.runtime import RuntimeOptions


def _infer(client: httpx.Client, url: str, sample: int, rid: str) -> dict:  # type: ignore[type-arg]
    body = {"id": rid, "inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [sample]}]}
    r = client.post(f"{url}/v2/models/toy/infer", json=body, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_feedback_labels_feed_the_tuner_and_changes_are_logged(toy_profile: Profile) -> None:
    def tuning(tables: PlanTables) -> OnlineTuning:
        # target 0: once the window holds 5 labels, the periodic re-tune lowers the threshold as far as it goes
        return OnlineTuning.for_plan(
            tables, toy_profile, target=0.0, audit_fraction=0.5, reference="label", min_records=5, period_s=0.1
        )

    plan = toy_plan(toy_profile)
    plan = plan.model_copy(update={"gears": (plan.gears[0].model_copy(update={"thresholds": (0.15,)}),)})
    with serving(toy_profile, plan, runtime_options=RuntimeOptions(tuning=tuning)) as s, httpx.Client() as client:
        url = s.url
        before = httpx.get(f"{url}/v2/cascade/plan", timeout=10).json()
        assert before["tuning"]["reference"] == "label" and before["tuning"]["audit_fraction"] == 0.5
        assert before["tuning"]["gears"][0]["thresholds"] == [0.15] and before["tuning"]["recent_changes"] == []
        models = [_infer(client, url, i, f"q{i}")["outputs"][2]["data"][0] for i in range(24)]
        early = sum(m == "m0" for m in models)
        last = len(models) - early
        assert early >= 2 and last >= 5
        rt = s.app.runtime
        assert rt.tuning is not None
        for _ in range(200):  # the audited early exits' continuations finish off the critical path
            if rt.tuning.pending == last + early // 2:
                break
            time.sleep(0.01)
        # one feedback per request: whole records (answered by m1, or audited: every second early exit) enter
        # the label window; an early exit that was not audited has no record and enters nothing
        records = 0
        for i in range(24):
            r = client.post(f"{url}/v2/models/toy/feedback", json={"id": f"q{i}", "label": int(toy_profile.labels[i])})
            assert r.status_code == 200, r.text
            records += r.json()["tuning_records"]
        assert records == last + early // 2
        assert rt.tuning.pending == 0
        changed = 0.0
        for _ in range(300):  # the producer's next tick re-tunes and logs the change
            changed = metric(client.get(f"{url}/metrics", timeout=10).text, "cascadeserve_threshold_changes_total")
            if changed >= 1:
                break
            time.sleep(0.01)
        text = httpx.get(f"{url}/metrics", timeout=10).text
        assert changed >= 1
        assert metric(text, "cascadeserve_tuning_window_records") == records
        doc = httpx.get(f"{url}/v2/cascade/plan", timeout=10).json()
        recent = doc["tuning"]["recent_changes"]
        assert recent and recent[0]["old"] == [0.15] and recent[0]["reason"] == "periodic"
        assert doc["gears"][0]["thresholds"] == doc["tuning"]["gears"][0]["thresholds"] == recent[-1]["new"]
        assert metric(text, "cascadeserve_threshold") == recent[-1]["new"][0]
        # the document read back is a plan that can be put back as it is (its tuning report is ignored)
        put = httpx.put(f"{url}/v2/cascade/plan", json=doc, headers=ADMIN, timeout=10)
        assert put.status_code == 200, put.text
