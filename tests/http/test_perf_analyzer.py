"""Triton's perf_analyzer 2.50, unchanged, drives cascades over HTTP and gRPC (briefly: about a second per run).

It reads the model metadata and config, then sends ``[batch] + dims`` of each input: a 1-D INT64 ``sample_id`` as
``[b, 1]``, which the server must take (:mod:`tests.http.test_shapes` has the rule). The emulated cascade's sample
ids are validation ids, so it sends zeros (``--input-data zero``: sample 0); a text cascade takes its random
strings. With ``--shared-memory system`` it registers a region per input and output over the protocol it drives
(the server allows any client to: ``allow_client_shm``, Triton's ``--allow-client-shm=true``), reads every output
from there and unregisters them all (CUDA regions too, of which there are none). perf_analyzer is not a Python
package: ``bash scripts/perf_analyzer.sh`` installs it in a venv of its own
(``CASCADESERVE_PERF_ANALYZER`` names another binary); the test is skipped, saying so, where none runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.grpc.grpc_helpers import grpc_serving

from cascadeserve.http import Server
from cascadeserve.profile import Profile
from cascadeserve.runtime import InputSpec, LocalBackend, ModelConfig

pytestmark = pytest.mark.slow

_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cascadeserve" / "perf-analyzer-2.50"
_THROUGHPUT = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec, latency (\d+) usec")


def _binary() -> str:
    given = os.environ.get("CASCADESERVE_PERF_ANALYZER")
    candidates = [given] if given else [str(_CACHE / "perf_analyzer"), shutil.which("perf_analyzer")]
    why = []
    for c in candidates:
        if not c or not Path(c).is_file():
            continue
        try:
            run = subprocess.run([c, "--version"], capture_output=True, text=True, timeout=30)
        except OSError as e:
            why.append(f"{c}: {e}")
            continue
        if run.returncode == 0:
            return c
        why.append(f"{c}: {(run.stderr or run.stdout).strip()[-200:]}")
    pytest.skip(
        "perf_analyzer is not installed ("
        + ("; ".join(why) or "none found")
        + "): `bash scripts/perf_analyzer.sh` installs 2.50, or set CASCADESERVE_PERF_ANALYZER"
    )


@pytest.fixture(scope="module")
def perf_analyzer() -> str:
    return _binary()


def _text_model(batch: np.ndarray) -> np.ndarray:
    return np.eye(3)[[len(str(t)) % 3 for t in batch]]


@pytest.fixture(scope="module")
def emulated(toy_profile: Profile) -> Iterator[Server]:
    with grpc_serving(toy_profile, allow_client_shm=True) as server:
        yield server


@pytest.fixture(scope="module")
def text(toy_profile: Profile) -> Iterator[Server]:
    models = ModelConfig({"m0": _text_model, "m1": _text_model}, InputSpec("text", "BYTES", (-1,)))
    with grpc_serving(toy_profile, models=models, backend=LocalBackend()) as server:
        yield server


def _drive(binary: str, server: Server, protocol: str, *extra: str) -> list[tuple[int, float]]:
    port = server.grpc_port if protocol == "grpc" else server.port
    cmd = [binary, "-m", "toy", "-u", f"127.0.0.1:{port}", "-i", protocol, "--concurrency-range", "1:2"]
    cmd += ["--measurement-interval", "500", "-p", "500", "--stability-percentage", "100", "--max-trials", "10"]
    run = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Unable to" not in run.stdout + run.stderr, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [(int(c), float(t)) for c, t, _ in _THROUGHPUT.findall(run.stdout)]
    print(f"perf_analyzer -i {protocol} {' '.join(extra)}:", *_THROUGHPUT.findall(run.stdout), sep="\n  ")
    return rows


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("batch", ["1", "4"])
def test_perf_analyzer_drives_a_1d_int64_input(perf_analyzer: str, emulated: Server, protocol: str, batch: str) -> None:
    served = emulated.app.metrics.stats.render("toy")["model_stats"][0]["inference_count"]
    rows = _drive(perf_analyzer, emulated, protocol, "--input-data", "zero", "-b", batch)
    assert [c for c, _ in rows] == [1, 2] and all(t > 0 for _, t in rows), rows
    assert emulated.app.metrics.stats.render("toy")["model_stats"][0]["inference_count"] > served


def test_perf_analyzer_with_system_shared_memory(perf_analyzer: str, emulated: Server) -> None:
    """HTTP, then gRPC, in one test: perf_analyzer names its shared-memory objects after the tensors, so two runs at
    once (two test workers) would share, and unlink, each other's."""
    for protocol in ("http", "grpc"):
        served = emulated.app.metrics.stats.render("toy")["model_stats"][0]["inference_count"]
        shared = ["--shared-memory", "system", "--output-shared-memory-size", "1024"]
        rows = _drive(perf_analyzer, emulated, protocol, "--input-data", "zero", "-b", "4", *shared)
        assert [c for c, _ in rows] == [1, 2] and all(t > 0 for _, t in rows), rows
        assert emulated.app.metrics.stats.render("toy")["model_stats"][0]["inference_count"] > served
        assert emulated.app.asgi.api.shared.shm.regions == {}  # type: ignore[attr-defined]  # all unregistered


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_drives_a_text_cascade(perf_analyzer: str, text: Server, protocol: str) -> None:
    rows = _drive(perf_analyzer, text, protocol)
    assert [c for c, _ in rows] == [1, 2] and all(t > 0 for _, t in rows), rows
