"""An open-loop client that sends *real* inputs (one validation image per request) and records every answer.

``cascadeserve bench`` sends sample ids (emulated serving); the demo serves real models, so each request carries
the 64 pixel values of validation sample ``i mod n`` and the answer is checked against its label. Per request it
keeps the send time, latency, HTTP status, the gear that served it and whether the label was right, which is
what the summary and the timeline plot need.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp
import numpy as np

__all__ = ["Replay", "replay"]


@dataclass(frozen=True, eq=False)
class Replay:
    sent_s: np.ndarray  # scheduled send time of each request (s from start)
    latency_ms: np.ndarray  # NaN where no answer came back
    status: np.ndarray  # HTTP status, -1 for a connection error
    gear: np.ndarray  # gear index that served it, -1 if unknown
    correct: np.ndarray  # bool
    model: list[str]

    @property
    def ok(self) -> np.ndarray:
        return np.asarray(self.status == 200)

    @property
    def lost(self) -> int:
        return int((~self.ok).sum())

    def p95_ms(self) -> float:
        lat = self.latency_ms[self.ok]
        return float(np.percentile(lat, 95)) if len(lat) else float("nan")

    def accuracy(self) -> float:
        return float(self.correct[self.ok].mean()) if self.ok.any() else float("nan")


async def _replay(url: str, model: str, arrivals: np.ndarray, inputs: np.ndarray, labels: np.ndarray) -> Replay:
    n = len(arrivals)
    latency = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int64)
    gear = np.full(n, -1, dtype=np.int64)
    correct = np.zeros(n, dtype=bool)
    served = [""] * n
    bodies = [
        json.dumps(
            {"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, inputs.shape[1]], "data": row.tolist()}]}
        ).encode()
        for row in inputs
    ]
    target = f"{url}/v2/models/{model}/infer"
    connector = aiohttp.TCPConnector(limit=512)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def one(i: int) -> None:
            k = i % len(bodies)
            t0 = time.perf_counter()
            try:
                async with session.post(target, data=bodies[k], headers={"content-type": "application/json"}) as r:
                    payload = await r.read()
                    status[i] = r.status
                latency[i] = (time.perf_counter() - t0) * 1000.0
                if status[i] == 200:
                    obj = json.loads(payload)
                    gear[i] = int(obj.get("parameters", {}).get("gear", -1))
                    out = {o["name"]: o["data"] for o in obj["outputs"]}
                    correct[i] = int(out["label"][0]) == int(labels[k])
                    served[i] = str(out["model"][0])
            except (TimeoutError, aiohttp.ClientError, OSError):
                status[i] = -1

        tasks = []
        start = time.perf_counter()
        i = 0
        while i < n:
            now = time.perf_counter() - start
            if arrivals[i] > now:
                await asyncio.sleep(arrivals[i] - now)
                now = time.perf_counter() - start
            while i < n and arrivals[i] <= now:
                tasks.append(asyncio.create_task(one(i)))
                i += 1
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
    return Replay(arrivals.copy(), latency, status, gear, correct, served)


def replay(url: str, model: str, arrivals: np.ndarray, inputs: np.ndarray, labels: np.ndarray) -> Replay:
    """Send one request per arrival time (open loop) with the inputs cycled; wait for every answer."""
    return asyncio.run(_replay(url.rstrip("/"), model, np.asarray(arrivals, dtype=np.float64), inputs, labels))
