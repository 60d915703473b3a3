"""``serve`` as an operator meets it: the banner names the port actually bound (``--port 0``) and only once it is
bound; SIGTERM makes the server not ready and stops admission at once, answers what is in flight, then exits; a
non-loopback bind without a token warns; ``bench`` refuses to send sample 0 over and over to an emulated server."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, save_profile

CLI = [sys.executable, "-c", "from cascadeserve.cli import main; main()"]


def _ids(ids: list[int]) -> dict[str, object]:
    return {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [len(ids)], "data": ids}]}


def test_banner_port_sigterm_drain_and_bench_without_profile(toy_profile: Profile, tmp_path: Path) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    # batches of 8 or after 600 ms: requests sent just before SIGTERM are still waiting when it lands
    plan = fixed_plan(
        toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),), min_queue=8, max_wait_ms=600
    )
    plan_path = plan.save(tmp_path / "plan.json")
    cmd = [*CLI, "serve", "--plan", str(plan_path), "--profile", str(prof_dir), "--emulate", "--port", "0"]
    proc = subprocess.Popen([*cmd, "--grace-s", "5"], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        # serve --emulate may first say what per-batch overhead it measured; the banner follows within a few lines
        for _ in range(5):
            line = proc.stderr.readline()
            m = re.search(r"serving model 'toy' .* on http://127\.0\.0\.1:(\d+)", line)
            if m:
                break
        assert m, line
        port = int(m.group(1))
        assert port != 0 and "control plane off" in line
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200
        code = run(["bench", "--url", url, "--name", "toy", "--trace", "synthetic:constant:qps=10,duration=1"])
        assert code == 2  # no --profile against an emulated server: refused, not a silent sample-0 workload

        async def in_flight_then_sigterm() -> tuple[list[int], list[int]]:
            async with httpx.AsyncClient(timeout=20) as client:
                pending = [
                    asyncio.ensure_future(client.post(f"{url}/v2/models/toy/infer", json=_ids([i]))) for i in range(3)
                ]
                await asyncio.sleep(0.2)  # admitted, waiting for their batch
                proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.1)
                after = []
                for path in ("/v2/health/ready",):
                    try:
                        after.append((await client.get(url + path)).status_code)
                    except httpx.HTTPError:
                        after.append(-1)  # the listener is already closed: not ready either
                return [(await p).status_code for p in pending], after

        answered, after = asyncio.run(in_flight_then_sigterm())
        assert answered == [200, 200, 200]  # in flight when SIGTERM came: answered, not dropped
        assert after[0] != 200
        rc = proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    # uvicorn re-raises the signal it handled once it has shut down, so the exit may be SIGTERM's own
    assert ("stopped" in err or rc == -signal.SIGTERM) and rc in (0, -signal.SIGTERM) and "Traceback" not in err, err


def test_non_loopback_without_token_warns_and_banner_waits_for_the_bind(toy_profile: Profile, tmp_path: Path) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan_path = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),)).save(
        tmp_path / "plan.json"
    )
    with socket.socket() as busy:  # a port already taken, so the server never listens beyond loopback
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = [*CLI, "serve", "--plan", str(plan_path), "--profile", str(prof_dir), "--emulate"]
        done = subprocess.run(
            [*cmd, "--host", "0.0.0.0", "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2
    assert "not a loopback address, without --auth-token" in done.stderr
    assert "serving model" not in done.stderr  # the banner only follows a successful bind
    bad = subprocess.run([*cmd, "--max-wait-slos", "-1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--max-wait-slos" in bad.stderr
    t0 = time.monotonic()
    tls = subprocess.run(
        [*cmd, "--ssl-certfile", str(tmp_path / "nope.pem")], capture_output=True, text=True, timeout=60
    )
    assert tls.returncode == 2 and "--ssl-keyfile" in tls.stderr and time.monotonic() - t0 < 60


def test_connection_limits_are_serve_options(toy_profile: Profile, tmp_path: Path) -> None:
    """--header-timeout-s closes a connection that sends nothing; --max-connections refuses one past the cap."""
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan_path = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),)).save(
        tmp_path / "plan.json"
    )
    cmd = [*CLI, "serve", "--plan", str(plan_path), "--profile", str(prof_dir), "--emulate", "--port", "0"]
    cmd += ["--no-measure-overhead", "--header-timeout-s", "0.5", "--max-connections", "2"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline()
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        assert m, line
        port = int(m.group(1))
        with socket.create_connection(("127.0.0.1", port), timeout=20) as first:
            t0 = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=20) as second:
                with socket.create_connection(("127.0.0.1", port), timeout=20) as third:  # past the cap
                    assert third.recv(4096).startswith(b"HTTP/1.1 503 ")
                assert second.recv(4096).startswith(b"HTTP/1.1 408 ")
            assert first.recv(4096).startswith(b"HTTP/1.1 408 ") and time.monotonic() - t0 < 15
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
