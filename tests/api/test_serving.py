"""The library's server, as a script uses it: ``cascadeserve.Server`` from keywords (files or objects in memory) or
from a planned workload, listening for a ``with`` block on 127.0.0.1 and answering V2 requests; a bad setting is one
error naming it, before anything starts; the CLI's defaults are the config's."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from tests.http.http_helpers import toy_plan

import cascadeserve as cs
from cascadeserve.api import DEFAULTS, ServeConfig
from cascadeserve.errors import CascadeServeError
from cascadeserve.profile import Profile, save_profile


def test_a_server_from_objects_in_memory_answers_v2_and_stops(toy_profile: Profile, tmp_path: Path) -> None:
    lines: list[str] = []
    plan = toy_plan(toy_profile)
    with cs.Server(
        plan=plan, profile=toy_profile, emulate=True, port=0, measure_overhead=False, say=lines.append
    ) as srv:
        meta = httpx.get(f"{srv.url}/v2/models/{srv.name}", timeout=60).json()
        assert meta["name"] == "toy" and [i["name"] for i in meta["inputs"]] == ["sample_id"]
        body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [2], "data": [1, 2]}]}
        r = httpx.post(f"{srv.url}/v2/models/toy/infer", json=body, timeout=60)
        assert r.status_code == 200 and len(r.json()["outputs"][0]["data"]) == 2
        url = srv.url
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/v2/health/live", timeout=5)  # stopped on exit
    with pytest.raises(RuntimeError, match="not running"):
        _ = srv.url


def test_a_server_from_files_records_its_state_where_told(toy_profile: Profile, tmp_path: Path) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan_file = toy_plan(toy_profile).save(tmp_path / "plan.json")
    config = ServeConfig(plan=plan_file, profile=prof_dir, emulate=True, port=0, state_dir=tmp_path / "state")
    with cs.Server(config=config, say=lambda _: None) as srv:
        assert httpx.get(f"{srv.url}/v2/health/ready", timeout=60).status_code == 200


def test_bad_settings_fail_before_anything_starts(toy_profile: Profile) -> None:
    plan = toy_plan(toy_profile)
    for settings, message in [
        ({"max_in_flight": 0}, "--max-in-flight"),
        ({"backend": "mainframe"}, "--backend: 'mainframe' is not one of local, ray"),
        ({"replan": "auto"}, "--replan: a re-plan reads the profile folder"),
        ({"emulate": False}, "give --models config.yaml, or --emulate"),
    ]:
        with pytest.raises(CascadeServeError, match=message):
            cs.Server(plan=plan, profile=toy_profile, port=0, **{"emulate": True, **settings}).start()
    with pytest.raises(TypeError, match="give config= alone"):
        cs.Server(config=ServeConfig(plan=plan, profile=toy_profile), port=0)


def test_the_cli_defaults_are_the_configs() -> None:
    import inspect

    from cascadeserve.cli.serve import serve

    for name, p in inspect.signature(serve).parameters.items():
        if name in DEFAULTS:
            got = p.default
            assert (tuple(got) if isinstance(got, list) else got) == DEFAULTS[name], name
    assert DEFAULTS["host"] == "127.0.0.1"  # loopback unless told otherwise
