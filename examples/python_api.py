"""The Python API from start to serving, on the example workload (the digits family): profile, plan, simulate and
serve it from a script, then ask the server for the cascade's V2 metadata.

    python examples/python_api.py [DIR]     # DIR: where the workload goes (default: a new temporary folder)

Each step does its work only when its inputs changed since it last ran (the workload's ``.cascadeserve/`` folder), as
``cascadeserve up`` does: run it twice and the second run profiles and plans nothing.
"""

from __future__ import annotations

import sys
import tempfile

import httpx

import cascadeserve as cs


def main(directory: str) -> dict[str, object]:
    wl = cs.Workload.example(directory, force=True)  # your own: cs.Workload.from_file("cascadeserve.yaml")
    prof = cs.profile(wl)  # measured, then calibrated to this host by serving it (as the workload says)
    gear_plan = cs.plan(wl, prof)  # the gear plan for the workload's SLO, devices and load
    sim = cs.simulate(gear_plan, prof, trace="synthetic:poisson:qps=20,duration=10")
    print(f"simulated at 20 QPS: p95 {sim.p95_ms:.2f} ms, accuracy {sim.accuracy:.3f}")
    with cs.Server(wl, gear_plan, prof, port=0) as srv:  # listening on 127.0.0.1 until the block ends
        meta: dict[str, object] = httpx.get(f"{srv.url}/v2/models/{srv.name}", timeout=60).json()
    print(f"served {meta['name']}: inputs {meta['inputs']}")
    return meta


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="cascadeserve-"))
