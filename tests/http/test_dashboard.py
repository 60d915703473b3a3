"""The Grafana dashboard in docs/ queries only metrics a real server exports (scraped from a server with re-planning
on, so every family is there), and is a well-formed dashboard Grafana imports: unique panel ids, a Prometheus
datasource input, one expression per target."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from tests.http.test_replan import FAST, _server

from cascadeserve.profile import Profile
from cascadeserve.runtime.replanner import ReplanOptions

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
PROFILE = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"


def _queried(dashboard: dict[str, object]) -> set[str]:
    """Every metric family the panels' expressions name (a histogram's _bucket, _sum and _count are its family)."""
    names: set[str] = set()
    for panel in dashboard["panels"]:  # type: ignore[attr-defined]
        for target in panel["targets"]:
            for name in re.findall(r"cascadeserve_[a-z0-9_]+", target["expr"]):
                names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def _exported(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_every_metric_the_dashboard_queries_is_exported(real_profile: Profile) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    server = _server(real_profile, ReplanOptions(FAST, PROFILE))
    try:
        body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [1]}]}
        assert httpx.post(f"{server.url}/v2/models/tweets/infer", json=body, timeout=60).status_code == 200
        text = httpx.get(f"{server.url}/metrics", timeout=60).text
    finally:
        server.stop()
    queried, exported = _queried(dashboard), _exported(text)
    assert len(queried) >= 25
    assert queried <= exported, sorted(queried - exported)
    # and the gear's range is there, around the load the gear was chosen for
    low = float(re.search(r"^cascadeserve_gear_qps_low (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    high = float(re.search(r"^cascadeserve_gear_qps_high (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert 0.0 <= low < high


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    for panel in dashboard["panels"]:
        assert panel["title"] and panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
