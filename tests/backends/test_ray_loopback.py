"""``serve --backend ray`` starts a Ray instance whose every process listens on 127.0.0.1 only.

Ray's default node (the host's outbound address) has the GCS, the raylet, the workers and the dashboard agent
listening on ``*``, ``0.0.0.0`` and the host's address, unauthenticated beyond a token file: anyone who reaches them
runs code in the cluster. The test starts a real server with a new local Ray instance and reads every listening
socket of its process tree, as ``ss -ltnp`` would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.backends.test_ray import CLI_PATIENCE_S, _devices, _port, _wait_ready

from cascadeserve.cascade import Cascade
from cascadeserve.hosts import is_loopback_host
from cascadeserve.plan import fixed_plan
from cascadeserve.profile import Profile, save_profile

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from cascadeserve.backends.ray.loopback import is_loopback_address  # noqa: E402


def _listeners(root: int) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every TCP socket listening in ``root``'s process tree."""
    try:
        top = psutil.Process(root)
        pids = {root} | {p.pid for p in top.children(recursive=True)}
    except psutil.NoSuchProcess:
        return []
    out = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            try:
                name = psutil.Process(c.pid).name()
            except psutil.NoSuchProcess:
                continue
            out.append((c.laddr.ip, c.laddr.port, name))
    return out


@pytest.mark.timeout(900)  # a Ray driver of its own: minutes to start on a busy 2-core box
def test_a_new_ray_instance_listens_on_loopback_only(toy_profile: Profile, tmp_path: Path) -> None:
    save_profile(toy_profile, tmp_path / "profile")
    fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), _devices(2), max_wait_ms=5.0).save(tmp_path / "plan.json")
    cli = Path(sys.executable).parent / "cascadeserve"
    log = tmp_path / "serve.err"
    # no --address: the server starts its own Ray instance (not the test session's); RAY_ADDRESS would be ignored
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": "127.0.0.1:1"}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)  # the server must switch single-host mode on by itself
    for _attempt in range(5):
        port = _port()
        cmd = [str(cli), "serve", "--backend", "ray", "--emulate", "--plan", str(tmp_path / "plan.json")]
        cmd += ["--profile", str(tmp_path / "profile"), "--port", str(port), "--name", "toy", "--grace-s", "1"]
        with log.open("w") as err_file:
            proc = subprocess.Popen(cmd, stderr=err_file, text=True, env=env)
        ready = _wait_ready(proc, port)
        if proc.poll() is None:
            break
        assert "address already in use" in log.read_text(), log.read_text()
    try:
        assert ready, f"not ready after {CLI_PATIENCE_S:.0f} s; its stderr:\n{log.read_text()[-4000:]}"
        listening = _listeners(proc.pid)
        names = {name for _ip, _port, name in listening}
        # the server itself, and the Ray processes it started: the GCS and the raylet at least
        assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), listening
        exposed = [entry for entry in listening if not is_loopback_host(entry[0].split("%", 1)[0])]
        assert exposed == [], f"listening beyond loopback: {exposed}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=CLI_PATIENCE_S)
    assert proc.returncode == 0, log.read_text()[-4000:]


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:6379", True),
        ("localhost:6379", True),
        ("[::1]:6379", True),
        ("127.0.0.2:6379", True),
        ("10.0.0.5:6379", False),
        ("head.example:6379", False),
        ("auto", False),
        ("ray://127.0.0.1:10001", False),
        (None, False),
    ],
)
def test_which_cluster_addresses_are_joined_on_loopback(address: str | None, loopback: bool) -> None:
    assert is_loopback_address(address) is loopback
