"""``serve --grpc-port 0``: the banner names the gRPC port bound (on --host, loopback), tritonclient.grpc infers
through it on uvicorn's own event loop (the CLI's, uvloop where installed), and SIGTERM stops both front ends."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as tg

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, save_profile

CLI = [sys.executable, "-c", "from cascadeserve.cli import main; main()"]


def test_serve_grpc_port_banner_infer_and_sigterm(toy_profile: Profile, tmp_path: Path) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), (Device(name="d0", memory_mb=1000),), max_wait_ms=5)
    plan_path = plan.save(tmp_path / "plan.json")
    cmd = [*CLI, "serve", "--plan", str(plan_path), "--profile", str(prof_dir), "--emulate", "--no-measure-overhead"]
    cmd += ["--port", "0", "--grpc-port", "0", "--grace-s", "2"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        for _ in range(5):
            line = proc.stderr.readline()
            m = re.search(r"on http://127\.0\.0\.1:(\d+) and gRPC on 127\.0\.0\.1:(\d+);", line)
            if m:
                break
        assert m, line
        port = int(m.group(2))
        assert port != 0
        c = tg.InferenceServerClient(f"127.0.0.1:{port}")
        assert c.is_server_ready()
        inp = tg.InferInput("sample_id", [2], "INT64")
        inp.set_data_from_numpy(np.array([3, 4], dtype=np.int64))
        result = c.infer("toy", [inp])
        assert result.as_numpy("label").shape == (2,)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert rc in (0, -signal.SIGTERM) and "Traceback" not in err, err


def test_grpc_port_out_of_range_is_refused(toy_profile: Profile, tmp_path: Path) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))
    cmd = [*CLI, "serve", "--plan", str(plan.save(tmp_path / "plan.json")), "--profile", str(prof_dir), "--emulate"]
    done = subprocess.run([*cmd, "--grpc-port", "70000"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--grpc-port: 70000" in done.stderr
