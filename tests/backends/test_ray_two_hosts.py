"""``cascadeserve serve --backend ray --address`` on a Ray cluster of two hosts: a plan's two devices are served by
server actors on different nodes, and every request crosses from one host to the other.

The hosts are two Linux network namespaces of this machine joined by a veth pair (10.213.x.1 and .2), each running
a Ray node started by ``ray start`` (the head with ``--head``, the worker with ``--address``), token
authentication on: every process gets ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH`` (a token file of this
test's own). The server runs in the head namespace, joins with ``--address``, and a client there sends V2
requests with tritonclient.http. A driver with a wrong token is refused.

Placement is certain, not left to Ray's scheduler: each node has one CPU, and the plan's two devices are CPU
devices with real models (a models config whose factory answers the profile's records,
:func:`tests.backends.two_hosts_helper.profile_model`), so each server actor asks for one CPU and the two cannot
share a node. (An emulated device's server asks for no CPU, and ``serve`` has no option to pin a device to a
node: both would usually land on the head.) The plan puts the first stage on one device and the second on the
other, so each unsure sample is forwarded from one host's server to the other's.

Needs root (``ip netns``); skipped otherwise. Every process started in the namespaces is ended by its id (the
namespaces' pids) and the namespaces are deleted, also on failure; ``ray stop`` is not used: it ends every Ray
process of the machine, other tests' instances included.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, GearPlan, fixed_plan
from cascadeserve.policy import is_sure
from cascadeserve.profile import Profile, save_profile

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("two_hosts_helper.py")
BIN = Path(sys.executable).parent
GCS_PORT = 6379
HTTP_PORT = 8000  # the namespace is new: only this test's processes bind there (Ray's random ports are ephemeral)
PATIENCE_S = 600.0  # a loaded machine may take minutes to start Ray and a server's actors
THRESHOLD = 0.1  # about half of the toy profile's m0 answers are surer than this: both stages answer


@dataclass(frozen=True)
class Cluster:
    head: str  # network namespace names
    worker: str
    head_ip: str
    worker_ip: str
    tmp: Path
    env: dict[str, str]  # for every process in the namespaces

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{GCS_PORT}"

    def command(self, ns: str, *args: str) -> list[str]:
        return ["ip", "netns", "exec", ns, *args]

    def helper(self, *args: str, timeout: float = PATIENCE_S) -> Any:
        cmd = self.command(self.head, sys.executable, str(HELPER), *args)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env, cwd=ROOT)
        assert out.returncode == 0, f"{args[0]}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        return json.loads(out.stdout.strip().splitlines()[-1])


def _run(*cmd: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=timeout)


def _env(token: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    # Ray's single-host switch (the loopback mode of a local instance) must be off: it refuses to join a cluster
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)  # servers import tests.backends
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), PYTHONPATH=path, PYTHONUNBUFFERED="1")
    env.update(RAY_USAGE_STATS_ENABLED="0")
    return env


def _end_processes(ns: str) -> None:
    """End every process in namespace ``ns`` (all started by this test), by id: SIGTERM, then SIGKILL (the GCS
    server and the autoscaler monitor outlive a SIGTERM by more than 15 s; ``ray stop --force`` kills too)."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 15.0)):
        pids = [int(p) for p in _run("ip", "netns", "pids", ns).stdout.split()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        t0 = time.monotonic()
        while pids and time.monotonic() - t0 < wait_s:
            pids = [int(p) for p in _run("ip", "netns", "pids", ns).stdout.split()]
            time.sleep(0.2)
        if not pids:
            return


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if importlib.util.find_spec("ray") is None or not (BIN / "ray").exists():
        pytest.skip("ray is not installed")
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("two hosts as network namespaces need root (ip netns)")
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2)")
    pid = os.getpid()
    head, worker = f"cs-head-{pid}", f"cs-work-{pid}"
    net = f"10.213.{pid % 250 + 1}"
    tmp = Path(tempfile.mkdtemp(prefix="cs2h", dir="/tmp"))  # short: Ray's socket paths stay under 107 bytes
    made: list[str] = []
    veth_h, veth_w = f"csh{pid}", f"csw{pid}"
    try:
        for ns in (head, worker):
            res = _run("ip", "netns", "add", ns)
            if res.returncode != 0:
                pytest.skip(f"`ip netns add` failed: {res.stderr.strip()}")
            made.append(ns)
        steps = [
            ("link", "add", veth_h, "type", "veth", "peer", "name", veth_w),
            ("link", "set", veth_h, "netns", head),
            ("link", "set", veth_w, "netns", worker),
            ("-n", head, "addr", "add", f"{net}.1/24", "dev", veth_h),
            ("-n", worker, "addr", "add", f"{net}.2/24", "dev", veth_w),
            ("-n", head, "link", "set", "lo", "up"),
            ("-n", worker, "link", "set", "lo", "up"),
            ("-n", head, "link", "set", veth_h, "up"),
            ("-n", worker, "link", "set", veth_w, "up"),
        ]
        for step in steps:
            res = _run("ip", *step)
            if res.returncode != 0:
                pytest.skip(f"`ip {' '.join(step)}` failed: {res.stderr.strip()}")
        token = tmp / "token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        c = Cluster(head, worker, f"{net}.1", f"{net}.2", tmp, _env(token))
        ray = str(BIN / "ray")
        common = ["--num-cpus", "1", "--object-store-memory", str(80 << 20), "--disable-usage-stats"]
        started = [
            c.command(head, ray, "start", "--head", "--node-ip-address", c.head_ip, "--port", str(GCS_PORT),
                      "--resources", '{"head_host": 2}', "--include-dashboard=false", "--temp-dir", str(tmp / "h"),
                      *common),
            c.command(worker, ray, "start", "--address", c.address, "--node-ip-address", c.worker_ip,
                      "--resources", '{"worker_host": 2}', "--temp-dir", str(tmp / "w"), *common),
        ]  # fmt: skip
        for cmd in started:
            res = _run(*cmd, env=c.env, timeout=PATIENCE_S)
            assert res.returncode == 0, (
                f"{' '.join(cmd)}: exit {res.returncode}\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
            )
        yield c
    finally:
        for ns in reversed(made):
            _end_processes(ns)
        for ns in reversed(made):
            _run("ip", "netns", "del", ns)  # and the veth pair with it
        _run("ip", "link", "del", veth_h)  # still here only if moving it into a namespace failed
        shutil.rmtree(tmp, ignore_errors=True)


def _plan(profile: Profile) -> GearPlan:
    """Two CPU devices: m0 on d0 only, m1 on d1 only (each a share of 1), so every unsure sample crosses hosts."""
    devices = (Device(name="d0", memory_mb=1000, kind="cpu"), Device(name="d1", memory_mb=1000, kind="cpu"))
    plan = fixed_plan(profile, Cascade(("m0", "m1"), (THRESHOLD,)), devices, max_wait_ms=5.0, backend="ray")
    keep = {("m0", "d0"), ("m1", "d1")}
    raw = plan.model_dump(mode="json")
    raw["replicas"] = [r for r in raw["replicas"] if (r["model"], r["device"]) in keep]
    for gear in raw["gears"]:
        gear["replicas"] = [dict(r, share=1.0) for r in gear["replicas"] if (r["model"], r["device"]) in keep]
    return GearPlan.model_validate(raw)


@pytest.mark.timeout(900)
def test_a_plan_split_over_two_hosts_serves_every_request(
    cluster: Cluster, toy_profile: Profile, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    save_profile(toy_profile, tmp_path / "profile")
    _plan(toy_profile).save(tmp_path / "plan.json")
    ref = "tests.backends.two_hosts_helper:profile_model"
    models = {m: {"factory": ref, "kwargs": {"profile": str(tmp_path / "profile"), "model": m}} for m in ("m0", "m1")}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    nodes = cluster.helper("cluster", cluster.address, "2", str(PATIENCE_S))
    assert nodes["nodes"] == sorted([cluster.head_ip, cluster.worker_ip]), nodes

    cmd = cluster.command(cluster.head, str(BIN / "cascadeserve"), "serve", "--backend", "ray")
    cmd += ["--address", cluster.address, "--models", str(tmp_path / "models.yaml")]
    cmd += ["--plan", str(tmp_path / "plan.json"), "--profile", str(tmp_path / "profile")]
    cmd += ["--port", str(HTTP_PORT), "--name", "toy", "--grace-s", "1"]
    log = tmp_path / "serve.err"  # a file, not a pipe: nobody reads a pipe while the server starts
    env = {**cluster.env, "CASCADESERVE_STATE_DIR": os.environ["CASCADESERVE_STATE_DIR"]}
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stderr=err, stdout=err, text=True, env=env, cwd=ROOT)
    try:
        waiter = subprocess.Popen(
            cluster.command(cluster.head, sys.executable, str(HELPER), "ready", str(HTTP_PORT), str(PATIENCE_S)),
            stdout=subprocess.PIPE, text=True, env=cluster.env, cwd=ROOT,
        )  # fmt: skip
        while waiter.poll() is None and proc.poll() is None:
            time.sleep(0.2)
        if waiter.poll() is None:  # the server exited first
            waiter.kill()
        waiter.wait()
        assert waiter.returncode == 0, f"not ready (exit {proc.poll()}); its log:\n{log.read_text()[-4000:]}"
        ready_s = time.monotonic() - t0

        answers = cluster.helper("infer", str(HTTP_PORT))
        state = cluster.helper("cluster", cluster.address, "2", "60")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=PATIENCE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    assert "ray backend" in text and "stopped" in text, text[-4000:]

    assert len(answers) == 24
    seen: set[str] = set()
    for a in answers:
        assert a["status"] == 200, a
        for i, label, m in zip(a["ids"], a["labels"], a["models"], strict=True):
            assert label == toy_profile.predictions[toy_profile.index(m), i], (i, m, label)
            answering = "m0" if is_sure(toy_profile.certainties[0, i], THRESHOLD) else "m1"
            assert m == answering, (i, m)  # the profile's certainty, forwarded as the plan's threshold says
            seen.add(m)
    assert seen == {"m0", "m1"}  # both stages answered: unsure samples went to the other host's server

    servers = [a for a in state["actors"] if a["class"] == "InferenceServer" and a["state"] == "ALIVE"]
    assert sorted(a["ip"] for a in servers) == sorted([cluster.head_ip, cluster.worker_ip]), state
    print(f"two hosts: ready after {ready_s:.1f} s, done after {time.monotonic() - t0:.1f} s")


@pytest.mark.timeout(900)  # it may start the cluster (module fixture)
def test_a_driver_without_the_token_is_refused(cluster: Cluster) -> None:
    wrong = cluster.tmp / "wrong-token"
    wrong.write_text(secrets.token_hex(32))
    wrong.chmod(0o600)
    env = {**cluster.env, "RAY_AUTH_TOKEN_PATH": str(wrong)}
    cmd = cluster.command(cluster.head, sys.executable, str(HELPER), "connect", cluster.address)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert out.returncode != 0 and "connected" not in out.stdout, out.stdout
