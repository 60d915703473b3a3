"""The open-loop load generator behind ``cascadeserve bench`` and ``eval fidelity``.

Open loop: request ``i`` is sent at ``start + arrivals[i]`` whether or not earlier ones were answered, the way
real clients behave and the way the simulator replays a trace. The sender never waits for answers; each request
is its own task on one aiohttp session (aiohttp, not httpx: it costs a few times less CPU per request, and the
generator must not be the bottleneck). The generator measures its own *send lag* (how late each request left
against its scheduled time) and reports it, so a saturated client shows up as lag rather than as fake server
latency.

Request ``i`` carries validation sample ``sample_ids[i mod n]``; when labels are given, answers are checked. Against
a server that takes sample ids (an emulated one) the ids are required: sending one sample over and over would be a
different workload from the one the simulator replays (it cycles through the validation set).

Outcomes are counted apart: ``ok`` (200), ``shed`` (503, and how many of those carried ``Retry-After``),
``too_large`` (413), ``deadline`` (504), ``timed_out`` (the client gave up), ``refused`` (no connection) and
``errors`` (anything else). At most ``connections`` requests are open at once; a request waiting for a
connection counts in its latency, as a real client's would.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import numpy as np

from cascadeserve.policy.costs import mean_and_p95

__all__ = ["KEPT_ERRORS", "LoadReport", "run_load"]

KEPT_ERRORS = 1000  # failed connections a report describes one by one (all are counted)


@dataclass(frozen=True)
class LoadReport:
    sent: int
    ok: int
    shed: int  # 503
    errors: int  # anything but 200, 503, 413, 504, a client timeout or a refused connection
    p50_ms: float
    p95_ms: float
    p99_ms: float
    accuracy: float | None
    throughput_qps: float
    duration_s: float
    fallback: int
    send_lag_p50_ms: float
    send_lag_p99_ms: float
    send_lag_max_ms: float
    server_p95_ms: float  # p95 of queue + compute time reported by the server (no HTTP in it)
    server_p50_ms: float
    status_counts: dict[str, int]
    too_large: int = 0  # 413
    deadline: int = 0  # 504
    timed_out: int = 0  # the client's own timeout ran out
    refused: int = 0  # the connection failed
    shed_with_retry_after: int = 0  # 503 answers that carried a Retry-After header
    # each failed connection (``refused``): seconds since the first send and the client's error, "Type: message"
    # (the first :data:`KEPT_ERRORS`): which failure, and when, so that a long run's errors can be explained
    connection_errors: tuple[tuple[float, str], ...] = ()
    # the 503s by the server's reason, numbers masked ("the front door is N ms behind (N in flight)"): why it shed
    shed_reasons: dict[str, int] = field(default_factory=dict)
    # what the client saw of each answered request beyond the server's admission-to-answer time (``server_ms`` in
    # the answer): HTTP both ways, the server's event loop, this client's own CPU; mean and p95 with the top 1 % left
    # out (0 where the server does not say). ``profile calibrate --bench`` records them for the simulator.
    front_door_ms: float = 0.0
    front_door_p95_ms: float = 0.0
    # per answered request, in arrival order (kept out of to_dict: a distribution, not a summary)
    latency_ms: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    server_ms: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    ok_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False, compare=False)
    shed_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False, compare=False)
    # per answered request: whether its label was right (all False without labels)
    correct: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), repr=False, compare=False)
    # per answered request: the gear that answered it (-1 where the server did not say), to set beside a simulation's
    gear: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The summary, floats rounded (milliseconds to 0.01, rates to 0.1, accuracy to 1e-4)."""
        out: dict[str, Any] = {}
        for k, v in asdict(self).items():
            if k in ("latency_ms", "server_ms", "ok_index", "shed_index", "correct", "gear"):
                continue
            if isinstance(v, float):
                v = round(v, 4 if k == "accuracy" else 1 if k.endswith("qps") else 2)
            out[k] = v
        return out


def _reason(payload: bytes) -> str:
    """A 503's error message with its numbers masked, so that the same cause counts once."""
    try:
        msg = str(json.loads(payload).get("error", ""))
    except (ValueError, AttributeError):
        msg = payload[:80].decode("utf-8", "replace")
    return re.sub(r"\d+(\.\d+)?", "N", msg)


def _pct(values: Sequence[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


async def _input_spec(session: aiohttp.ClientSession, url: str, model: str) -> dict[str, Any]:
    async with session.get(f"{url}/v2/models/{model}") as r:
        if r.status != 200:
            raise RuntimeError(f"GET /v2/models/{model}: HTTP {r.status}: {await r.text()}")
        meta = await r.json()
    return dict(meta["inputs"][0])


def _flat(row: Any) -> list[Any]:
    return list(np.asarray(row).reshape(-1).tolist())


def _body_factory(spec: dict[str, Any], have_ids: bool, rows: np.ndarray | None = None) -> Callable[[int], bytes]:
    """Sample ids for the emulated ``sample_id`` input (which needs the ids); row ``i mod n`` of ``rows`` when given;
    else a placeholder row of the declared shape (zeros; ``false`` for BOOL, a short text for BYTES)."""
    name, dt, shape = spec["name"], spec["datatype"], list(spec["shape"])
    if rows is not None and not (name == "sample_id" and dt == "INT64"):
        row_shape = [1, *rows.shape[1:]]
        bodies = [  # np.asarray: a text row is a bare str in an object array
            json.dumps({"inputs": [{"name": name, "datatype": dt, "shape": row_shape, "data": _flat(r)}]}).encode()
            for r in rows
        ]
        return lambda i: bodies[i % len(bodies)]
    if name == "sample_id" and dt == "INT64":
        if not have_ids:
            raise ValueError(
                "the server takes validation sample ids (an emulated server): give the profile's sample ids "
                "(bench --profile), or every request would send sample 0, a different workload from the one simulated"
            )
        head = b'{"inputs":[{"name":"sample_id","datatype":"INT64","shape":[1],"data":['

        def make(sid: int) -> bytes:
            return head + str(sid).encode() + b"]}]}"

        return make
    row_shape = [1] + [1 if s < 0 else s for s in shape[1:]]
    # one placeholder per element of a row of the declared shape: BOOL takes true/false only, BYTES strings
    fill: Any = {"BOOL": False, "BYTES": "a test sentence"}.get(dt, 0)
    body = json.dumps(
        {"inputs": [{"name": name, "datatype": dt, "shape": row_shape, "data": [fill] * int(np.prod(row_shape))}]}
    ).encode()
    return lambda sid: body


async def run_load(
    url: str,
    model: str,
    arrivals: Sequence[float] | np.ndarray,
    *,
    sample_ids: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
    timeout_ms: float | None = None,
    request_timeout_s: float = 60.0,
    progress: Callable[[int, int], None] | None = None,
    connections: int = 256,
    rows: np.ndarray | None = None,
) -> LoadReport:
    """Send one request per arrival time (seconds from now), open loop; summarise what came back. ``rows``: the
    inputs to send to a model that takes real inputs (request ``i`` sends row ``i mod len(rows)``)."""
    url = url.rstrip("/")
    arr = np.asarray(arrivals, dtype=np.float64)
    n = len(arr)
    ids = np.asarray(sample_ids if sample_ids is not None else [0], dtype=np.int64)
    retry_after = 0
    lab = None if labels is None else np.asarray(labels)
    latency = np.full(n, np.nan)
    server = np.full(n, np.nan)
    admitted = np.full(n, np.nan)  # the server's admission-to-answer time (s), where it says
    correct = np.zeros(n, dtype=bool)
    status = np.zeros(n, dtype=np.int64)
    fallback = 0
    gear = np.full(n, -1, dtype=np.int64)
    lag = np.zeros(n)
    done = 0
    conn_errors: list[tuple[float, str]] = []
    shed_reasons: Counter[str] = Counter()
    start = time.perf_counter()  # reset at the first send
    connector = aiohttp.TCPConnector(limit=connections, force_close=False)
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        make = _body_factory(await _input_spec(session, url, model), sample_ids is not None, rows)
        target = f"{url}/v2/models/{model}/infer"
        headers = {"content-type": "application/json"}
        extra = b""
        if timeout_ms is not None:
            extra = b',"parameters":{"timeout_ms":' + str(float(timeout_ms)).encode() + b"}"

        async def one(i: int) -> None:
            nonlocal done, fallback, retry_after
            body = make(i if rows is not None else int(ids[i % len(ids)]))
            if extra:
                body = body[:-1] + extra + b"}"
            t0 = time.perf_counter()
            try:
                async with session.post(target, data=body, headers=headers) as r:
                    payload = await r.read()
                    status[i] = r.status
                    if r.status == 503:
                        retry_after += "Retry-After" in r.headers
                        shed_reasons[_reason(payload)] += 1
                latency[i] = time.perf_counter() - t0
                if status[i] == 200:
                    obj = json.loads(payload)
                    params = obj.get("parameters", {})
                    server[i] = (params.get("queue_ms", 0.0) + params.get("compute_ms", 0.0)) / 1000.0
                    if "server_ms" in params:
                        admitted[i] = float(params["server_ms"]) / 1000.0
                    gear[i] = int(params.get("gear", -1))
                    if params.get("fallback"):
                        fallback += 1
                    if lab is not None:
                        label = next(o["data"][0] for o in obj["outputs"] if o["name"] == "label")
                        correct[i] = label == lab[i % len(lab)]
            except TimeoutError:
                status[i] = -2
            except (aiohttp.ClientError, OSError) as e:
                status[i] = -1
                if len(conn_errors) < KEPT_ERRORS:
                    conn_errors.append((round(time.perf_counter() - start, 3), f"{type(e).__name__}: {e}"))
            finally:
                done += 1

        # only the tasks still running: a list of every task kept each done one (its frame, its result) to the end,
        # and the garbage collector's full passes, which scan every live object, grew with the run (287 ms
        # every ~48 s by minute 5 of a soak, and a stalled client sends the next requests in one burst)
        tasks: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []  # what a request's task raised past its own handling, raised at the end

        def finished(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                failures.append(exc)

        start = time.perf_counter()
        i = 0
        last_report = 0.0
        while i < n:
            now = time.perf_counter() - start
            if arr[i] > now:
                await asyncio.sleep(arr[i] - now)
                now = time.perf_counter() - start
            # send everything that is due, late ones at once (the lag records how late)
            while i < n and arr[i] <= now:
                lag[i] = now - arr[i]
                task = asyncio.create_task(one(i))
                tasks.add(task)
                task.add_done_callback(finished)
                i += 1
            if progress is not None and now - last_report > 0.1:
                progress(i, done)
                last_report = now
            await asyncio.sleep(0)  # let responses in even when the schedule is dense
        await asyncio.gather(*list(tasks), return_exceptions=True)
        if failures:
            raise failures[0]
        end = time.perf_counter() - start
        if progress is not None:
            progress(n, done)
    ok_mask = status == 200
    ok = int(ok_mask.sum())
    lat_ok = latency[ok_mask] * 1000.0
    span = end - (float(arr[0]) if n else 0.0)
    counts: dict[str, int] = {}
    for s in status.tolist():
        key = "timed_out" if s == -2 else "connection_error" if s < 0 else str(s)
        counts[key] = counts.get(key, 0) + 1
    named = {503, 413, 504, -1, -2}
    door = (latency - admitted)[ok_mask] * 1000.0
    door_ms, door_p95_ms = mean_and_p95(np.maximum(door[np.isfinite(door)], 0.0))
    return LoadReport(
        sent=n,
        ok=ok,
        shed=int((status == 503).sum()),
        errors=int(n - ok - np.isin(status, list(named)).sum()),
        p50_ms=_pct(lat_ok, 50),
        p95_ms=_pct(lat_ok, 95),
        p99_ms=_pct(lat_ok, 99),
        accuracy=float(correct[ok_mask].mean()) if lab is not None and ok else None,
        throughput_qps=ok / span if span > 0 else 0.0,
        duration_s=end,
        fallback=fallback,
        send_lag_p50_ms=_pct(lag * 1000.0, 50),
        send_lag_p99_ms=_pct(lag * 1000.0, 99),
        send_lag_max_ms=float(lag.max() * 1000.0) if n else 0.0,
        server_p95_ms=_pct(server[ok_mask] * 1000.0, 95),
        server_p50_ms=_pct(server[ok_mask] * 1000.0, 50),
        status_counts=counts,
        too_large=int((status == 413).sum()),
        deadline=int((status == 504).sum()),
        timed_out=int((status == -2).sum()),
        refused=int((status == -1).sum()),
        shed_with_retry_after=retry_after,
        connection_errors=tuple(conn_errors),
        shed_reasons=dict(shed_reasons),
        front_door_ms=door_ms,
        front_door_p95_ms=door_p95_ms,
        latency_ms=lat_ok,
        server_ms=server[ok_mask] * 1000.0,
        ok_index=np.flatnonzero(ok_mask),
        shed_index=np.flatnonzero(status == 503),
        correct=correct[ok_mask],
        gear=gear[ok_mask],
    )
