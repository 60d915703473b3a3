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


def test_each_shed_request_is_indexed_and_counted_by_the_servers_reason(toy_profile: Profile) -> None:
    arrivals = np.zeros(40)  # 40 at once against a bound of one in flight: the ones that meet a full server shed
    with serving(toy_profile, max_in_flight=1) as server:
        rep = asyncio.run(run_load(server.url, "toy", arrivals, sample_ids=toy_profile.sample_ids))
    assert rep.ok + rep.shed == rep.sent == 40 and rep.shed > 0
    assert len(rep.shed_index) == rep.shed and not set(rep.shed_index) & set(rep.ok_index)
    assert rep.shed_reasons == {"admission queue full (N of N in flight)": rep.shed}
    assert rep.to_dict()["shed_reasons"] == rep.shed_reasons and "shed_index" not in rep.to_dict()
