"""The load generator against a real server on 127.0.0.1: every failed connection is counted and described (its
time and the client's error), so that a long run's connection errors can be explained afterwards."""

from __future__ import annotations

import asyncio
import builtins
import threading

import aiohttp
import numpy as np
from tests.http.http_helpers import serving

from cascadeserve.eval.loadgen import run_load
from cascadeserve.profile import Profile

# the client errors run_load catches: aiohttp's and the OS's
ERROR_TYPES = {
    name
    for mod in (aiohttp, aiohttp.client_exceptions, builtins)
    for name, obj in vars(mod).items()
    if isinstance(obj, type) and issubclass(obj, (aiohttp.ClientError, OSError))
}


def test_each_failed_connection_is_described_with_its_time_and_error(toy_profile: Profile) -> None:
    arrivals = np.arange(0.0, 3.0, 0.025)  # 40 requests a second for 3 s; the server stops after about 1 s
    with serving(toy_profile) as server:
        stopper = threading.Timer(1.0, server.stop)
        stopper.start()
        try:
            rep = asyncio.run(run_load(server.url, "toy", arrivals, sample_ids=toy_profile.sample_ids))
        finally:
            stopper.join()
    assert rep.sent == len(arrivals)
    assert rep.ok > 0 and rep.refused > 0  # answered before the stop, refused after it
    assert len(rep.connection_errors) == rep.refused
    for t, error in rep.connection_errors:
        assert 0.0 <= t <= 3.0 + 60.0
        kind, _, message = error.partition(": ")
        assert kind in ERROR_TYPES and message
    assert rep.to_dict()["connection_errors"] == rep.connection_errors
