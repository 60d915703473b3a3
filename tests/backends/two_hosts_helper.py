"""Helpers of tests/backends/test_ray_two_hosts.py: a model that answers a profile's records, and the commands that
run inside a network namespace (a "host") of that test.

``profile_model`` is a factory of the models config's factory form (``m0: {factory:
tests.backends.two_hosts_helper:profile_model, kwargs: {profile: DIR, model: m0}}``): a real model, served on a CPU
device (so its Ray server asks for one CPU), whose scores for a sample id give the profile's recorded prediction and
certainty for it. Its answers can be checked against the profile as an emulated device's are.

The commands run in a namespace with ``ip netns exec NS python tests/backends/two_hosts_helper.py COMMAND ...``
(the test's process, in the root namespace, reaches neither the namespace's loopback nor its veth address) and
print one line of JSON:

* ``ready PORT SECONDS``: poll the server's readiness until it answers 200 (exit 0) or SECONDS pass (exit 1).
* ``infer PORT``: send requests with tritonclient.http, a few at a time, and print each request's sample ids, HTTP
  status, labels and answering models.
* ``cluster ADDRESS NODES SECONDS``: join the Ray cluster as a driver, wait until NODES nodes are alive, and print
  the alive nodes' IP addresses and every actor's class, state and node IP address (from the GCS actor table: the
  state API needs the dashboard, which the test's head node does not run).
* ``connect ADDRESS``: join the cluster and print ``connected`` (the test runs it with a wrong token, and expects
  a refusal).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import numpy as np

N_CLASSES_MIN = 2


def profile_model(profile: str, model: str) -> Callable[[np.ndarray], np.ndarray]:
    """A model whose scores for sample id ``i`` are probabilities with the profile's prediction on top and a margin
    equal to the profile's certainty (the models config's default ``certainty: margin``)."""
    from cascadeserve.profile import load_profile

    prof = load_profile(profile)
    row = prof.index(model)
    preds = prof.predictions[row]
    certs = prof.certainties[row]
    n_classes = max(N_CLASSES_MIN, int(max(prof.labels.max(), prof.predictions.max())) + 1)
    index = {int(s): i for i, s in enumerate(prof.sample_ids.tolist())}

    def scores(batch: np.ndarray) -> np.ndarray:
        cols = [index[int(s)] for s in np.asarray(batch).reshape(len(batch), -1)[:, 0]]
        c = certs[cols]
        # top - runner-up = c when the others share what the top leaves; a hair more on top breaks a tie at c = 0
        rest = (1.0 - c) / n_classes
        out = np.repeat(rest[:, None], n_classes, axis=1)
        out[np.arange(len(cols)), preds[cols]] = rest + c + 1e-12
        return out

    return scores


def _ready(port: int, seconds: float) -> int:
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5).status_code == 200:
                print(json.dumps({"ready": True, "after_s": round(time.monotonic() - t0, 1)}))
                return 0
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    print(json.dumps({"ready": False}))
    return 1


def _infer(port: int, requests: int = 24, size: int = 8) -> int:
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException

    def one(k: int) -> dict[str, Any]:
        client = triton.InferenceServerClient(f"127.0.0.1:{port}", connection_timeout=120, network_timeout=120)
        ids = np.arange(k * size, (k + 1) * size, dtype=np.int64)
        inp = triton.InferInput("sample_id", [len(ids)], "INT64")
        inp.set_data_from_numpy(ids)
        try:
            res = client.infer("toy", [inp])
        except InferenceServerException as e:
            return {"ids": ids.tolist(), "status": str(e.status()), "error": str(e)}
        finally:
            client.close()
        return {
            "ids": ids.tolist(),
            "status": 200,
            "labels": [int(x) for x in res.as_numpy("label").reshape(-1)],
            "models": [m.decode() for m in res.as_numpy("model").reshape(-1)],
        }

    with ThreadPoolExecutor(4) as pool:
        out = list(pool.map(one, range(requests)))
    print(json.dumps(out))
    return 0


def _nodes() -> list[dict[str, Any]]:
    import ray

    return cast(Callable[[], list[dict[str, Any]]], ray.nodes)()  # Ray's function has no annotations


def _cluster(address: str, nodes: int, seconds: float) -> int:
    import ray
    from ray._private import state

    ray.init(address=address, log_to_driver=False, configure_logging=False)
    t0 = time.monotonic()
    alive: list[str] = []
    while time.monotonic() - t0 < seconds:
        alive = sorted(n["NodeManagerAddress"] for n in _nodes() if n["Alive"])
        if len(alive) >= nodes:
            break
        time.sleep(0.5)
    actors = [
        {"class": a["ActorClassName"], "state": a["State"], "ip": a["Address"]["IPAddress"]}
        for a in state.actors().values()
    ]
    print(json.dumps({"nodes": alive, "actors": actors}))
    ray.shutdown()
    return 0


def _connect(address: str) -> int:
    import ray

    ray.init(address=address, log_to_driver=False, configure_logging=False)
    print(json.dumps({"connected": True, "nodes": len(_nodes())}))
    ray.shutdown()
    return 0


def main(argv: list[str]) -> int:
    cmd, *args = argv
    if cmd == "ready":
        return _ready(int(args[0]), float(args[1]))
    if cmd == "infer":
        return _infer(int(args[0]))
    if cmd == "cluster":
        return _cluster(args[0], int(args[1]), float(args[2]))
    if cmd == "connect":
        return _connect(args[0])
    raise SystemExit(f"unknown command {cmd!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
