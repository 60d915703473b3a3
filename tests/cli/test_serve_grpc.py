"""``serve --grpc-port 0``: the banner names the gRPC port bound (on --host, loopback), tritonclient.grpc infers
through it on uvicorn's own event loop (the CLI's, uvloop where installed), and SIGTERM stops both front ends."""

from __future__ import annotations

import re
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as tg

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, save_profile

CLI = [sys.executable, "-c", "from cascadeserve.cli import main; main()"]


def _serve(profile: Profile, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    """``serve --emulate`` of a two-stage toy cascade on ports 0 (HTTP) and 0 (gRPC), stderr piped."""
    prof_dir = save_profile(profile, tmp_path / "toy")
    plan = fixed_plan(profile, Cascade(("m0", "m1"), (0.5,)), (Device(name="d0", memory_mb=1000),), max_wait_ms=5)
    cmd = [*CLI, "serve", "--plan", str(plan.save(tmp_path / "plan.json")), "--profile", str(prof_dir), "--emulate"]
    cmd += ["--no-measure-overhead", "--port", "0", "--grpc-port", "0", "--grace-s", "2", *extra]
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)


def _stopped(proc: subprocess.Popen[str]) -> None:
    """SIGTERM stops the server cleanly (killed if it does not stop, then the assertion says why)."""
    assert proc.stderr is not None
    try:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert rc in (0, -signal.SIGTERM) and "Traceback" not in err, err


def _ports(proc: subprocess.Popen[str], scheme: str) -> tuple[int, int]:
    """The HTTP and gRPC ports the banner names."""
    assert proc.stderr is not None
    line = ""
    for _ in range(5):
        line = proc.stderr.readline()
        m = re.search(rf"on {scheme}://127\.0\.0\.1:(\d+) and gRPC on 127\.0\.0\.1:(\d+);", line)
        if m:
            return int(m.group(1)), int(m.group(2))
    raise AssertionError(f"no banner: {line}")


def test_serve_grpc_port_banner_infer_and_sigterm(toy_profile: Profile, tmp_path: Path) -> None:
    proc = _serve(toy_profile, tmp_path)
    assert proc.stderr is not None
    try:
        _, port = _ports(proc, "http")
        assert port != 0
        c = tg.InferenceServerClient(f"127.0.0.1:{port}")
        assert c.is_server_ready()
        inp = tg.InferInput("sample_id", [2], "INT64")
        inp.set_data_from_numpy(np.array([3, 4], dtype=np.int64))
        result = c.infer("toy", [inp])
        assert result.as_numpy("label").shape == (2,)
    finally:
        _stopped(proc)


def test_grpc_port_out_of_range_is_refused(toy_profile: Profile, tmp_path: Path) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))
    cmd = [*CLI, "serve", "--plan", str(plan.save(tmp_path / "plan.json")), "--profile", str(prof_dir), "--emulate"]
    done = subprocess.run([*cmd, "--grpc-port", "70000"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--grpc-port: 70000" in done.stderr


def test_serve_over_tls_on_both_protocols(toy_profile: Profile, tmp_path: Path) -> None:
    """``--ssl-certfile``/``--ssl-keyfile`` (a throwaway CA's server certificate for 127.0.0.1): HTTPS answers a
    client that trusts that CA, gRPC does too with tritonclient's ``ssl=True``, and a plain-text client gets nothing."""
    import httpx
    import trustme
    from tritonclient.utils import InferenceServerException

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file, ca_file = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    proc = _serve(toy_profile, tmp_path, "--ssl-certfile", str(cert_file), "--ssl-keyfile", str(key_file))
    assert proc.stderr is not None
    try:
        http_port, grpc_port = _ports(proc, "https")
        body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [3]}]}
        trust = ssl.create_default_context(cafile=str(ca_file))
        r = httpx.post(f"https://127.0.0.1:{http_port}/v2/models/toy/infer", json=body, verify=trust, timeout=60)
        assert r.status_code == 200
        c = tg.InferenceServerClient(f"127.0.0.1:{grpc_port}", ssl=True, root_certificates=str(ca_file))
        inp = tg.InferInput("sample_id", [2], "INT64")
        inp.set_data_from_numpy(np.array([3, 4], dtype=np.int64))
        assert c.infer("toy", [inp]).as_numpy("label").shape == (2,)
        plain = tg.InferenceServerClient(f"127.0.0.1:{grpc_port}")  # no TLS: the handshake never completes
        try:
            plain.is_server_live(client_timeout=5)
            raise AssertionError("a plain-text gRPC client was answered over TLS")
        except InferenceServerException:
            pass
    finally:
        _stopped(proc)
