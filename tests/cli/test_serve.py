"""``cascadeserve serve`` and ``bench`` end to end: a subprocess on loopback, the load generator, SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from tests.cli_json import stdout_json

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.eval.fidelity import wait_ready
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, load_profile, save_profile


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_bench_and_sigterm(toy_profile: Profile, tmp_path: Path, capsys: object) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), (Device(name="d0", memory_mb=1000),), max_wait_ms=5)
    plan_path = plan.save(tmp_path / "plan.json")
    port = _port()
    cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "serve", "--plan", str(plan_path)]
    cmd += ["--profile", str(prof_dir), "--emulate", "--port", str(port), "--grace-s", "2"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        meta = httpx.get(f"{url}/v2/models/toy").json()
        assert meta["parameters"]["emulated"] is True
        trace = "synthetic:constant:qps=200,duration=1"
        # no --name: the server's one model
        code = run(["bench", "--url", url, "--trace", trace, "--profile", str(prof_dir), "--json"])
        assert code == 0
        out = stdout_json(capsys)  # type: ignore[arg-type]
        for key in ("sent", "ok", "shed", "errors", "p50_ms", "p95_ms", "p99_ms", "accuracy", "throughput_qps"):
            assert key in out
        assert out["sent"] == out["ok"] == 200 and out["errors"] == 0
        assert 0.3 < out["accuracy"] <= 1.0
        assert "send_lag_p99_ms" in out
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(15)
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert "stopped" in err or rc in (0, -signal.SIGTERM), err
    assert "Traceback" not in err


def test_serve_on_a_port_in_use_fails_with_exit_2(toy_profile: Profile, tmp_path: Path) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))
    plan_path = plan.save(tmp_path / "plan.json")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "serve", "--plan", str(plan_path)]
        cmd += ["--profile", str(prof_dir), "--emulate", "--port", str(port)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"could not listen on 127.0.0.1:{port}" in done.stderr


def test_the_thread_warning_names_the_models_file_and_a_count_that_fits(tmp_path: Path) -> None:
    import os

    from cascadeserve.api.checks import thread_note

    shipped = Path(__file__).resolve().parents[2] / "examples" / "llm" / "models.yaml"
    assert thread_note(shipped, 1) is None  # one thread per device: fits any host
    cores = os.cpu_count() or 1
    over = tmp_path / "models.yaml"
    over.write_text(shipped.read_text().replace("\nthreads: 1\n", f"\nthreads: {cores}\n"))
    note = thread_note(over, 2)
    assert note is not None
    assert note.startswith(f"warning: {over}: 2 devices × {cores} intra-op threads")
    assert f"set 'threads: {max(1, cores // 2)}'" in note


TWEETS = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"
NAMES = ["negative", "neutral", "positive"]


def _tweets_plan(tmp_path: Path) -> tuple[Profile, Path]:
    prof = load_profile(TWEETS)
    plan = fixed_plan(prof, Cascade(("nb-words", "lr-chars"), (0.5,)), (Device(name="d0", memory_mb=1000),))
    return prof, plan.save(tmp_path / "plan.json")


def test_serve_emulate_answers_the_class_names_of_the_models_file(tmp_path: Path) -> None:
    """``--emulate --models FILE`` loads no model but answers with the file's class names; ``/`` names the cascade."""
    prof, plan_path = _tweets_plan(tmp_path)
    models = tmp_path / "models.yaml"
    models.write_text("labels: [negative, neutral, positive]\nmodels: {nb-words: x.y:make, lr-chars: x.y:make}\n")
    port = _port()
    cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "serve", "--plan", str(plan_path)]
    cmd += ["--profile", str(TWEETS), "--emulate", "--models", str(models), "--port", str(port)]
    cmd += ["--no-measure-overhead"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, timeout_s=120.0)  # a generous bound: a busy machine starts a server slowly
        root = httpx.get(f"{url}/").json()
        assert [c["name"] for c in root["cascades"]] == ["tweets-sklearn"]
        meta = httpx.get(f"{url}{root['cascades'][0]['metadata']}").json()
        assert {"name": "class_name", "datatype": "BYTES", "shape": [-1, 1]} in meta["outputs"]
        ids = prof.sample_ids[:12].tolist()
        body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [len(ids)], "data": ids}]}
        out = httpx.post(f"{url}{root['cascades'][0]['infer']}", json=body, timeout=30).json()
        got = {o["name"]: o["data"] for o in out["outputs"]}
        assert sorted(set(got["label"])) == [0, 1, 2]  # every class answered at least once in these rows
        assert got["class_name"] == [NAMES[label] for label in got["label"]]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ("[negative, neutral]", "labels: no class name for label 2 (the profile's labels and predictions hold 3 "
         "classes, 0..2: give a name to each)"),
        ("[negative, neutral, negative]", "labels: duplicate class names: negative"),
        ("{0: negative, 1: '', 2: positive}", "labels: label 1: the class name must be a non-empty string, got ''"),
    ],
)  # fmt: skip
def test_a_bad_label_map_exits_2_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], labels: str, says: str
) -> None:
    _, plan_path = _tweets_plan(tmp_path)
    models = tmp_path / "models.yaml"
    models.write_text(f"labels: {labels}\nmodels: {{nb-words: x.y:make, lr-chars: x.y:make}}\n")
    args = ["serve", "--plan", str(plan_path), "--profile", str(TWEETS), "--models", str(models), "--emulate"]
    assert run([*args, "--no-measure-overhead", "--port", "0"]) == 2
    assert f"{models}: {says}" in " ".join(capsys.readouterr().err.split())


def test_bench_without_a_name_says_why_when_the_server_cannot_say(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert run(["bench", "--url", url, "--trace", "synthetic:constant:qps=1,duration=1"]) == 2
    err = capsys.readouterr().err
    assert f"--name: not given, and {url} could not say what it serves" in err
