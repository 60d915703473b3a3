"""The keep-alive race: a pooling client reuses an idle connection in the instant the server closes it.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_keepalive.py [--rounds 20] [--burst 64] [--json]

``cascadeserve serve --emulate`` (a one-model plan of the tweets profile) runs in a subprocess twice: with
``--keep-alive-s 5`` (uvicorn's own default) and with the default (75 s). Against each, an aiohttp client (its pool's
idle timeout is aiohttp's default, 15 s, as in ``eval/loadgen.py``) sends ``--burst`` concurrent inference requests,
then stays idle for 5 s plus an offset that sweeps -50..+50 ms across the rounds, so that some reuses meet the
server's close of its idle connections; ``--rounds`` times. The figure per setting is the number of requests that
failed, by the client's error type; every other request must be answered 200.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from bench_front_door import _body, _port, _sample_ids, _wait

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from cascadeserve.cli import run; sys.argv[0] = 'cascadeserve'; sys.exit(run())"


async def _client(url: str, ids: list[int], rounds: int, burst: int) -> dict[str, Any]:
    errors: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    headers = {"content-type": "application/json"}

    async def one(i: int, session: aiohttp.ClientSession) -> None:
        try:
            async with session.post(url, data=_body(ids[i % len(ids)]), headers=headers) as r:
                await r.read()
                statuses[r.status] += 1
        except (aiohttp.ClientError, OSError) as e:
            errors[type(e).__name__] += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=burst)) as session:
        for k in range(rounds):
            await asyncio.gather(*(one(k * burst + j, session) for j in range(burst)))
            offset = -0.05 + 0.1 * k / max(1, rounds - 1)
            await asyncio.sleep(5.0 + offset)
    return {"answered": dict(statuses), "errors": dict(errors), "failed": sum(errors.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--burst", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    profile = ROOT / "tests/data/profiles/tweets-sklearn"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    ids = _sample_ids(profile)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        subprocess.run(
            [sys.executable, "-c", CLI, "plan", "fixed", "--profile", str(profile), "--cascade", "nb-words",
             "--out", str(plan)],
            check=True, env=env, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for setting in ("5", "default"):
            port = _port()
            extra = [] if setting == "default" else ["--keep-alive-s", setting]
            proc = subprocess.Popen(
                [sys.executable, "-c", CLI, "serve", "--profile", str(profile), "--plan", str(plan), "--emulate",
                 "--no-measure-overhead", "--port", str(port), "--name", "m", *extra],
                env=env, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                _wait(f"http://127.0.0.1:{port}/v2/health/ready", proc)
                url = f"http://127.0.0.1:{port}/v2/models/m/infer"
                results[setting] = asyncio.run(_client(url, ids, args.rounds, args.burst))
            finally:
                proc.send_signal(signal.SIGINT)
                proc.wait(60)
            if not args.json:
                print(f"--keep-alive-s {setting}: {results[setting]}", flush=True)
    if args.json:
        print(json.dumps({"rounds": args.rounds, "burst": args.burst, **results}))


if __name__ == "__main__":
    main()
