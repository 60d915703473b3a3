"""The front door's CPU cost: server CPU per ``POST /v2/models/<name>/infer`` against a bare Starlette app.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_front_door.py [--requests 3000] [--runs 3] [--json]
        [--profile tests/data/profiles/tweets-sklearn] [--model nb-words] [--cprofile OUT.prof]

Two servers run in subprocesses on 127.0.0.1, both under uvicorn with the same settings (uvloop and httptools when
installed, no access log): ``cascadeserve serve --emulate`` on a one-model ``plan fixed`` plan of the profile, and a
bare Starlette app whose one route reads the body and returns, as constant bytes, the JSON cascadeserve answered to
the same request. One client process sends sequential requests (one ``sample_id`` row each) over one keep-alive
httpx connection to each in turn, interleaved, ``--runs`` times; for each run and server the figure is the server
process's CPU time (user + system, every thread, from ``/proc`` through psutil) over the requests, in µs per request.
CPU time, not wall time, because the machine is shared: what other jobs do slows the wall clock but not (much) what
one request costs the server. The report gives each server's median, and cascadeserve's added cost over the bare
app (median of the per-run differences).

``--cprofile OUT`` runs the cascadeserve server under cProfile (its main thread: the event loop) and writes the stats
to ``OUT`` when it stops; the CPU figures of that run include the profiler's own cost.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent

BARE_APP = textwrap.dedent(
    """
    import sys
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    port, path, body_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    answer = open(body_file, "rb").read()

    async def infer(request: Request) -> Response:
        await request.body()
        return Response(answer, media_type="application/json")

    app = Starlette(routes=[Route(path, infer, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    """
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code in (200, 404, 405):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def _body(i: int) -> bytes:
    return b'{"inputs":[{"name":"sample_id","datatype":"INT64","shape":[1],"data":[%d]}]}' % i


def _cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _drive(client: httpx.Client, url: str, n: int, ids: list[int]) -> None:
    headers = {"content-type": "application/json"}
    for k in range(n):
        r = client.post(url, content=_body(ids[k % len(ids)]), headers=headers)
        if r.status_code != 200:
            raise RuntimeError(f"{url}: {r.status_code} {r.text}")


def _measure(url: str, pid: int, n: int, ids: list[int]) -> float:
    """Server CPU µs per request over ``n`` sequential requests on one connection (after a warm-up)."""
    with httpx.Client(timeout=30) as client:
        _drive(client, url, 200, ids)
        c0 = _cpu_s(pid)
        _drive(client, url, n, ids)
        c1 = _cpu_s(pid)
    return (c1 - c0) / n * 1e6


def _sample_ids(profile: Path) -> list[int]:
    lines = (profile / "labels.csv").read_text().splitlines()[1:]
    return [int(line.split(",")[0]) for line in lines[:500]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", type=Path, default=ROOT / "tests/data/profiles/tweets-sklearn")
    ap.add_argument("--model", default="nb-words")
    ap.add_argument("--cprofile", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    ids = _sample_ids(args.profile)
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        plan = tmp / "plan.json"
        cli = "import sys; from cascadeserve.cli import run; sys.argv[0] = 'cascadeserve'; "
        subprocess.run(
            [sys.executable, "-c", cli + "sys.exit(run())", "plan", "fixed", "--profile", str(args.profile),
             "--cascade", args.model, "--out", str(plan)],
            check=True, env=env, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            cs_port = _port()
            run_cmd = "sys.exit(run())"
            if args.cprofile is not None:
                run_cmd = f"import cProfile; cProfile.run('run()', {str(args.cprofile)!r})"
            cs = subprocess.Popen(
                [sys.executable, "-c", cli + run_cmd, "serve", "--profile", str(args.profile), "--plan", str(plan),
                 "--emulate", "--no-measure-overhead", "--port", str(cs_port), "--name", "m"],
                env=env, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            procs.append(cs)
            cs_url = f"http://127.0.0.1:{cs_port}/v2/models/m/infer"
            _wait(f"http://127.0.0.1:{cs_port}/v2/health/ready", cs)
            answer = httpx.post(cs_url, content=_body(ids[0]), headers={"content-type": "application/json"}).content
            (tmp / "answer.json").write_bytes(answer)
            bare_port = _port()
            bare = subprocess.Popen(
                [sys.executable, "-c", BARE_APP, str(bare_port), "/v2/models/m/infer", str(tmp / "answer.json")],
                env=env,
            )
            procs.append(bare)
            bare_url = f"http://127.0.0.1:{bare_port}/v2/models/m/infer"
            _wait(f"http://127.0.0.1:{bare_port}/", bare)
            runs: list[dict[str, float]] = []
            for i in range(args.runs):
                order = [("cascadeserve", cs_url, cs.pid), ("bare", bare_url, bare.pid)]
                if i % 2:
                    order.reverse()
                run = {name: _measure(url, pid, args.requests, ids) for name, url, pid in order}
                run["load1"] = os.getloadavg()[0]
                runs.append(run)
                if not args.json:
                    print(
                        f"run {i + 1}: cascadeserve {run['cascadeserve']:.0f} µs/req, bare {run['bare']:.0f} µs/req, "
                        f"added {run['cascadeserve'] - run['bare']:.0f} µs (load {run['load1']:.2f})",
                        flush=True,
                    )
        finally:
            for p in procs:
                p.send_signal(signal.SIGINT)
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
    summary: dict[str, Any] = {
        "requests": args.requests,
        "runs": runs,
        "cascadeserve_us": statistics.median(r["cascadeserve"] for r in runs),
        "bare_us": statistics.median(r["bare"] for r in runs),
        "added_us": statistics.median(r["cascadeserve"] - r["bare"] for r in runs),
        "load1": [r["load1"] for r in runs],
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"median: cascadeserve {summary['cascadeserve_us']:.0f} µs/req, bare {summary['bare_us']:.0f} µs/req, "
            f"added {summary['added_us']:.0f} µs/req"
        )


if __name__ == "__main__":
    main()
