"""``cascadeserve init`` then ``cascadeserve up`` on the example workload: real models (the digits family) profiled,
calibrated to this host, planned and served on 127.0.0.1, a request answered, Ctrl-C stops it; a second ``up`` skips
profiling, calibration and planning."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cascadeserve.cli import run
from cascadeserve.cli.up import first_request
from cascadeserve.eval.fidelity import wait_ready
from cascadeserve.plan import load_plan
from cascadeserve.profile import costs_note, load_profile
from cascadeserve.workload import StateDir, load_workload


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_init_then_up_serves_the_example_and_a_second_up_skips_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    d = tmp_path / "w"
    assert run(["init", str(d)]) == 0
    assert f"cascadeserve up {d}" in capsys.readouterr().out
    assert run(["init", str(d)]) == 2  # never overwritten without --force

    port = _port()
    log = tmp_path / "up.log"
    cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "up", str(d), "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, timeout_s=400)  # profiling and planning on a busy 2-core machine
        request = first_request(load_workload(d))
        r = httpx.post(f"{url}/v2/models/digits/infer", json=request, timeout=60)
        assert r.status_code == 200, r.text
        outputs = {o["name"]: o["data"] for o in r.json()["outputs"]}
        assert outputs["label"][0] in range(10) and outputs["model"][0] in ("logreg", "cnn-small", "cnn-wide")
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(60)
    text = log.read_text()
    assert rc == 0, text
    assert "[1/4] profiling digits" in text and "[3/4] planning p95 ≤ 100 ms" in text
    assert "[2/4] calibrating to this host: the models served on 1 device(s) for 8 s" in text
    assert "[4/4] serving" in text
    assert f"endpoint: {url}/v2/models/digits/infer" in text and f"try: curl -s {url}/v2/models/digits/infer" in text
    assert "stopped" in text and "Traceback" not in text

    state = StateDir.of(load_workload(d))
    plan_mtime = state.plan.stat().st_mtime_ns
    assert run(["up", str(d), "--no-serve"]) == 0
    assert "profile up to date, calibration up to date, plan up to date" in capsys.readouterr().out
    assert state.plan.stat().st_mtime_ns == plan_mtime
    # the plan was made with what batches cost served on this host, not with the quiet profile
    measured, served = load_profile(state.measured), load_profile(state.profile)
    assert not measured.calibration and "this host under serving conditions" in (served.calibration or "")
    assert load_plan(state.plan).notes["costs"] == costs_note(served)
    assert [m.name for m in served.models] == [m.name for m in measured.models]

    # a planned workload is what a model repository's folder may hold: a load by its folder's name serves up's files
    from cascadeserve.http.repository import LoadError
    from cascadeserve.workload.repository import ModelRepository

    repo = ModelRepository(d.parent)
    files = repo.files(d.name, emulate=False)
    assert (files.plan, files.profile) == (state.plan.resolve(), state.profile.resolve())
    assert files.models is not None and files.models.resolve() == state.models_config().resolve()
    assert repo.files(d.name, emulate=True).models is None
    fresh = tmp_path / "fresh"
    assert run(["init", str(fresh)]) == 0
    with pytest.raises(LoadError, match="is not planned yet"):
        repo.files("fresh", emulate=False)
