"""``serve`` across restarts, as an operator meets it: a plan hot-swapped with PUT and a cascade loaded from the model
repository are served again after SIGTERM and a new start (the console says what was restored), ``--no-restore``
starts from the files, and an edited plan file wins over what was recorded for the old one."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from tests.conftest import make_toy_profile
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, emulated_folder

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, save_profile

CLI = [sys.executable, "-c", "from cascadeserve.cli import main; main()"]
DEVICES = (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000))


@contextmanager
def _serving(args: list[str], log: list[str]) -> Iterator[str]:
    """``serve`` with ``args`` in a child process until it is ready; its URL. SIGTERM at the end; ``log`` gets what
    it printed."""
    proc = subprocess.Popen([*CLI, "serve", *args], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        for line in proc.stderr:  # the banner comes once it listens, after what was restored
            lines.append(line)
            m = re.search(r"serving model .* on (http://127\.0\.0\.1:\d+)", line)
            if m:
                break
        else:
            raise AssertionError("".join(lines))
        yield m.group(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
        lines.extend(proc.stderr.readlines())
        log[:] = lines


def _thresholds(url: str) -> list[list[float]]:
    return [g["thresholds"] for g in httpx.get(f"{url}/v2/cascade/plan", timeout=60).json()["gears"]]


def test_a_hot_swapped_plan_and_a_loaded_cascade_survive_a_restart(toy_profile: Profile, tmp_path: Path) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan_file = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), DEVICES).save(tmp_path / "plan.json")
    swapped = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.8,)), DEVICES)
    repo = tmp_path / "repository"
    emulated_folder(repo, "b", make_toy_profile(n=300, seed=7))
    state = tmp_path / "state"
    args = ["--plan", str(plan_file), "--profile", str(prof_dir), "--emulate", "--no-measure-overhead", "--port", "0"]
    args += ["--admin-token", ADMIN_TOKEN, "--model-repository", str(repo), "--state-dir", str(state)]
    log: list[str] = []

    with _serving(args, log) as url:
        assert _thresholds(url) == [[0.5]]
        r = httpx.put(f"{url}/v2/cascade/plan", content=swapped.to_json(), headers=ADMIN, timeout=60)
        assert r.status_code == 200, r.text
        load = {"parameters": {"emulate": True}}
        r = httpx.post(f"{url}/v2/repository/models/b/load", json=load, headers=ADMIN, timeout=60)
        assert r.status_code == 200, r.text
    assert (state / "plans" / "toy.json").is_file() and (state / "repository.json").is_file()

    with _serving(args, log) as url:  # the same files: what served before the restart serves again
        assert _thresholds(url) == [[0.8]]
        index = httpx.post(f"{url}/v2/repository/index", timeout=60).json()
        assert [(m["name"], m["state"]) for m in index] == [("toy", "READY"), ("b", "READY")]
        body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [5]}]}
        assert httpx.post(f"{url}/v2/models/b/infer", json=body, timeout=60).status_code == 200
    text = "".join(log)
    assert "restored the plan of 'toy'" in text and "restored model 'b'" in text, text

    with _serving([*args, "--no-restore"], log) as url:  # fresh: the plan file, and only the first cascade
        assert _thresholds(url) == [[0.5]]
        index = httpx.post(f"{url}/v2/repository/index", timeout=60).json()
        assert [(m["name"], m.get("state")) for m in index] == [("toy", "READY"), ("b", None)]  # b: not loaded
    assert "restored" not in "".join(log)

    # --no-restore recorded what it served from then on (nothing loaded); the swap's record stays until replaced
    fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.6,)), DEVICES).save(plan_file)  # the operator edits the plan
    with _serving(args, log) as url:
        assert _thresholds(url) == [[0.6]]  # the edited file wins over what was recorded for the old one
    assert "not restored: the plan recorded for 'toy'" in "".join(log)
