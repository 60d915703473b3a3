"""A model repository served as Triton serves one, over real HTTP on 127.0.0.1 with tritonclient unchanged: a load of
a served name reloads it under a stream of requests with none lost (and a failed reload leaves the old one serving);
``none`` loads every folder at start and refuses the API; ``poll`` follows the folders as they are added, changed
and removed; ``explicit`` loads the folders ``--load-model`` names at start."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import tritonclient.http as th
from tests.conftest import make_toy_profile
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, emulated_folder, toy_plan

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.model_control import ModelControl
from cascadeserve.http.server import with_repository
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.workload.repository import ModelRepository, repository_builder

BODY = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [4]}]}
EMULATE = {"emulate": True}  # every folder here answers from its profile's records
DEVICES = (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000))


@contextmanager
def _server(root: Path, mode: str = "explicit", startup: Sequence[str] = (), poll_s: float = 15.0) -> Iterator[str]:
    prof = make_toy_profile()
    opts = ServerOptions(stop_grace_s=5.0, admin_token=ADMIN_TOKEN)
    app = build_app(prof, toy_plan(prof), emulate=True, name="a", server_options=opts)
    repo = ModelRepository(root)
    control = ModelControl(mode, repo.names, repo.signature, startup, poll_s, EMULATE)  # type: ignore[arg-type]
    built = with_repository(
        app, opts, repository_builder(repo, server_options=opts), available=repo.names, control=control
    )
    server = Server(built, "127.0.0.1", 0, grace_s=5.0).start()
    try:
        yield server.url
    finally:
        server.stop()


def _index(url: str) -> list[tuple[str, str | None]]:
    return [(m["name"], m.get("state")) for m in httpx.post(f"{url}/v2/repository/index", timeout=60).json()]


def _thresholds(url: str, name: str) -> list[list[float]]:
    plan = httpx.get(f"{url}/v2/cascade/plan", params={"model": name}, timeout=60).json()
    return [g["thresholds"] for g in plan["gears"]]


def _plan(profile: Profile, threshold: float) -> str:
    return fixed_plan(profile, Cascade(("m0", "m1"), (threshold,)), DEVICES).to_json()


def _until(check: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Wait for ``check()`` (a poll of the server's state), failing after ``timeout_s`` with ``what``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture()
def root(tmp_path: Path) -> tuple[Path, Profile]:
    prof = make_toy_profile(n=300, seed=7)
    emulated_folder(tmp_path / "repo", "b", prof)
    return tmp_path / "repo", prof


def test_a_reload_under_load_loses_no_request_and_a_failed_one_keeps_the_old(root: tuple[Path, Profile]) -> None:
    repo, prof = root
    with _server(repo) as url:
        client = th.InferenceServerClient(url.removeprefix("http://"))
        client.load_model("b", headers=ADMIN, config=json.dumps(EMULATE))
        statuses: list[int] = []
        refused: list[str] = []
        stop = threading.Event()

        def stream() -> None:
            with httpx.Client(timeout=60) as c:
                while not stop.is_set():
                    r = c.post(f"{url}/v2/models/b/infer", json=BODY)
                    statuses.append(r.status_code)
                    if r.status_code != 200:
                        refused.append(r.text)

        load = threading.Thread(target=stream)
        load.start()
        try:
            for t in (0.6, 0.7, 0.8):  # edit the folder's plan, then reload: the new plan serves
                (repo / "b" / "plan.json").write_text(_plan(prof, t))
                client.load_model("b", headers=ADMIN, config=json.dumps(EMULATE))
                assert _thresholds(url, "b") == [[t]] and client.is_model_ready("b")
            good = (repo / "b" / "plan.json").read_text()
            (repo / "b" / "plan.json").write_text("{broken")
            r = httpx.post(f"{url}/v2/repository/models/b/load", json={"parameters": EMULATE}, headers=ADMIN)
            assert r.status_code == 400 and "b/plan.json" in r.json()["error"], r.text
            assert _thresholds(url, "b") == [[0.8]] and client.is_model_ready("b")  # the old one still serves
            (repo / "b" / "plan.json").write_text(good)
        finally:
            stop.set()
            load.join(60)
        assert len(statuses) > 10 and set(statuses) == {200}, refused  # every request across three reloads answered
        assert _index(url) == [("a", "READY"), ("b", "READY")]


def test_mode_none_loads_every_folder_at_start_and_refuses_the_api(root: tuple[Path, Profile]) -> None:
    repo, prof = root
    emulated_folder(repo, "c", prof)
    (repo / "broken").mkdir()  # a folder that fails to load is skipped, the others load
    with _server(repo, "none") as url:
        assert _index(url) == [("a", "READY"), ("b", "READY"), ("c", "READY"), ("broken", None)]
        for action in ("load", "unload"):
            r = httpx.post(f"{url}/v2/repository/models/b/{action}", json={}, headers=ADMIN, timeout=60)
            assert r.status_code == 403 and "--model-control-mode none" in r.json()["error"]
        assert httpx.post(f"{url}/v2/models/c/infer", json=BODY, timeout=60).status_code == 200


def test_mode_poll_follows_the_folders(root: tuple[Path, Profile]) -> None:
    repo, prof = root
    with _server(repo, "poll", poll_s=0.2) as url:
        assert _index(url) == [("a", "READY"), ("b", "READY")]
        r = httpx.post(f"{url}/v2/repository/models/b/unload", headers=ADMIN, timeout=60)
        assert r.status_code == 403 and "while polling" in r.json()["error"]
        staging = repo.parent / "staging"
        emulated_folder(staging, "c", prof)
        shutil.move(staging / "c", repo / "c")  # a folder appears whole, as a deploy would move it in
        _until(lambda: ("c", "READY") in _index(url), "c to load")
        (repo / "c" / "plan.json").write_text(_plan(prof, 0.9))
        _until(lambda: _thresholds(url, "c") == [[0.9]], "c to reload with its new plan")
        shutil.rmtree(repo / "b")
        _until(lambda: ("b", "UNAVAILABLE") in _index(url), "b to unload")
        assert httpx.post(f"{url}/v2/models/c/infer", json=BODY, timeout=60).status_code == 200


def test_explicit_loads_what_load_model_names_at_start(root: tuple[Path, Profile]) -> None:
    repo, prof = root
    emulated_folder(repo, "c", prof)
    with _server(repo, startup=["c"]) as url:
        assert _index(url) == [("a", "READY"), ("c", "READY"), ("b", None)]
    with _server(repo, startup=["*"]) as url:
        assert _index(url) == [("a", "READY"), ("b", "READY"), ("c", "READY")]


def test_bad_model_control_options_are_one_line_each(tmp_path: Path) -> None:
    names: Callable[[], list[str]] = list
    with pytest.raises(ValueError, match="--load-model: only with --model-control-mode explicit"):
        ModelControl("poll", names, str, ["b"])
    with pytest.raises(ValueError, match="--model-control-mode: 'sometimes' is not one of none, explicit, poll"):
        ModelControl("sometimes", names, str)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="--repository-poll-s: 0 must be above 0"):
        ModelControl("poll", names, str, poll_s=0)
    prof = make_toy_profile(n=100)
    emulated_folder(tmp_path, "x", prof)
    base = ["serve", "--plan", str(tmp_path / "x" / "plan.json"), "--profile", str(tmp_path / "x" / "profile")]
    assert run([*base, "--emulate", "--model-control-mode", "poll"]) == 2  # needs --model-repository
    assert run([*base, "--emulate", "--model-repository", str(tmp_path), "--model-control-mode", "x"]) == 2
    assert json.loads((tmp_path / "x" / "plan.json").read_text())["gears"]  # the files are untouched
