"""The capacity curve of an upstream stage: batch time per batch size at each ``max_concurrency``.

An OpenAI-compatible server that answers every completion after ``--delay-ms`` (a Starlette app on 127.0.0.1, so
the figure is the upstream client's own cost, not a model's) is called through
:class:`~cascadeserve.models.upstream.UpstreamAdapter` with generation batches of each size; a batch of ``n`` at
concurrency ``c`` cannot take less than ``ceil(n / c)`` delays, and the rest is the client's overhead (threads,
httpx, JSON). Prints one row per (concurrency, batch size): the median of ``--repeats`` runs.

    python benchmarks/bench_upstream.py --delay-ms 100 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from cascadeserve.models.upstream import UpstreamAdapter


def _app(delay_s: float) -> Starlette:
    async def completions(request: Request) -> JSONResponse:
        await request.json()
        await asyncio.sleep(delay_s)
        top = [{"ok": -0.1, "no": -2.4}]
        lp = {"tokens": ["ok"], "token_logprobs": [-0.1], "top_logprobs": top, "text_offset": [0]}
        return JSONResponse({"choices": [{"text": "ok", "logprobs": lp, "index": 0}], "usage": {"prompt_tokens": 5}})

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay-ms", type=float, default=100.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    args = ap.parse_args()
    server = uvicorn.Server(uvicorn.Config(_app(args.delay_ms / 1000), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    item = json.dumps({"prompt": "The capital of France is"})
    print("concurrency  batch  median_ms  floor_ms  overhead_ms")
    try:
        for c in (int(x) for x in args.concurrency.split(",")):
            stage = UpstreamAdapter("remote", url, "m", max_concurrency=c)
            stage([item] * c)  # connections opened, threads started
            for n in (int(x) for x in args.batch_sizes.split(",")):
                runs = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    stage([item] * n)
                    runs.append((time.perf_counter() - t0) * 1000)
                floor = math.ceil(n / c) * args.delay_ms
                med = statistics.median(runs)
                print(f"{c:11d}  {n:5d}  {med:9.1f}  {floor:8.1f}  {med - floor:11.1f}")
            stage.close()
    finally:
        server.should_exit = True
        thread.join(10)


if __name__ == "__main__":
    main()
