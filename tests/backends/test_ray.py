"""The Ray backend on a real local Ray instance: faults, gear propagation, a 16-device plan, hot-swap onto new
devices, and ``cascadeserve serve --backend ray`` end to end with tritonclient.

The behaviour tests shared with the local backend live in tests/http (parametrised by ``backend``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tests.runtime.runtime_helpers import two_gear_plan

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy import is_sure
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, save_profile
from cascadeserve.runtime import Answer, Recorder, RuntimeOptions, ServingError

ray = pytest.importorskip("ray")
from cascadeserve.backends.ray import RayBackend, RayOptions, RayRuntime, server_actors  # noqa: E402
from cascadeserve.backends.ray.frontend import RayPlacement  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_session")


# How long a test waits for answers or a server before it calls the run hung: generous, because a loaded machine
# (CI shares its cores) may not run a server process for many seconds; pytest-timeout still ends a real hang.
PATIENCE_S = 240.0
CLI_PATIENCE_S = 600.0  # a `serve --backend ray` process of its own: its Ray driver starts slower still


def _devices(n: int, prefix: str = "d") -> tuple[Device, ...]:
    return tuple(Device(name=f"{prefix}{i}", memory_mb=1000) for i in range(n))


def _slow(base: Profile, ms: tuple[float, float] = (2.0, 30.0)) -> Profile:
    models = tuple(ModelProfile(f"m{i}", 100.0, RuntimeCurve((1, 64), (t, 2 * t))) for i, t in enumerate(ms))
    return Profile(
        "slow", models, base.sample_ids, base.labels, base.predictions[:2].copy(), base.certainties[:2].copy()
    )


async def _gather(reqs: list) -> list[Answer | BaseException]:  # type: ignore[type-arg]
    return list(await asyncio.gather(*(r.future for r in reqs), return_exceptions=True))


def test_killed_server_is_restarted_and_every_request_is_answered_exactly_once(toy_profile: Profile) -> None:
    prof = _slow(toy_profile)
    # Both models on both devices, so a request whose server dies has another replica to go to.
    plan = fixed_plan(prof, Cascade(("m0", "m1"), (0.3,)), _devices(2), min_queue=1, max_wait_ms=5.0)
    rec = Recorder()

    async def main() -> tuple[list[Answer | BaseException], float, int]:
        rt = RayBackend().emulated_runtime(prof, plan, observer=rec, options=RuntimeOptions(max_in_flight=None))
        assert isinstance(rt.placement, RayPlacement)
        await rt.start()
        victim = server_actors(rt)["d0"]
        born = await victim.ping.remote()
        reqs = []
        killed_at = 0.0
        for i in range(600):  # ~400 req/s for 1.5 s
            reqs += rt.submit([i % prof.n_samples])
            if i == 200:
                ray.kill(victim, no_restart=False)
                killed_at = time.monotonic()
            await asyncio.sleep(0.0025)
        results = await asyncio.wait_for(_gather(reqs), timeout=PATIENCE_S)
        while True:  # how long until the restarted server answers again
            try:
                if await asyncio.wait_for(victim.ping.remote(), timeout=5) != born:
                    break
            except Exception:
                await asyncio.sleep(0.02)
        restart_s = time.monotonic() - killed_at
        # after the restart (and the next poll, which re-installs its plan) d0 serves again
        await asyncio.sleep(0.3)
        n_before = sum(1 for b in rec.batches if b.device_name == "d0")
        more = await asyncio.wait_for(_gather(rt.submit(list(range(40)))), timeout=PATIENCE_S)
        await asyncio.sleep(0.3)
        served_again = sum(1 for b in rec.batches if b.device_name == "d0") - n_before
        await rt.stop(grace_s=1.0)
        assert all(isinstance(a, Answer) for a in more)
        return results, restart_s, served_again

    results, restart_s, served_again = asyncio.run(main())
    answers = [a for a in results if isinstance(a, Answer)]
    errors = [a for a in results if not isinstance(a, Answer)]
    assert errors == [], errors[:3]
    assert len(answers) == 600
    assert rec.n_admitted == 640 and rec.n_answered == 640 and rec.n_failed == 0 and rec.n_duplicates == 0
    # requests that m0 had finished and sent to m1 on the dead server are answered by m0, marked fallback
    assert any(a.fallback and a.model == "m0" for a in answers)
    assert served_again > 0  # how fast the restart is (about 1.5 s quiet, 70 s at load 16) is a benchmark figure
    print(f"restart {restart_s:.2f} s, fallbacks {sum(a.fallback for a in answers)}")


def test_gear_switch_reaches_every_server(toy_profile: Profile) -> None:
    """Every server applies the producer's switch, after it (once it has worked through what was sent before).
    How fast (within one 100 ms tick while the servers keep up: 26-57 ms over 16 servers) is a benchmark figure
    (``benchmarks/bench_ray.py``), not a test bound: on a busy machine a server process may not run for a few
    hundred ms, and this test then failed while nothing was wrong."""
    plan = two_gear_plan(low_high=60.0, max_wait_ms=10.0)
    rec = Recorder()

    async def main() -> None:
        rt = RayBackend().emulated_runtime(toy_profile, plan, observer=rec)
        assert isinstance(rt.placement, RayPlacement)
        await rt.start()
        reqs = []
        checked = False
        for i in range(400):  # 400 req/s for 1 s: gear 1 from the first tick that sees it, held while it lasts
            reqs += rt.submit([i])
            await asyncio.sleep(0.0025)
            if i == 300:  # under load (no switch back yet)
                gen = rt.current
                switch = [t for t in rec.ticks if t.switched]
                assert switch and switch[0].decision.gear == 1 and gen.gear == 1
                switched = gen.transport.switched_at
                checked = True
        assert checked
        # every server reports applying it after the switch. The load stops here: at load 12 a starved server fell
        # so far behind a continued stream (even 100 req/s) that every 5 s poll of it timed out for minutes. The
        # switch's broadcast waits in the server's queue behind the requests sent before it, so once the server has
        # worked through them it applies the switch (and any switch back after it) and the next poll reports it.
        sets = rt.placement.fleet.gear_set_at
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline and not all(
            sets.get(d, {}).get(gen.number, -1.0) >= switched for d in ("d0", "d1")
        ):
            await asyncio.sleep(0.1)
        # up first; on a starved machine the producer's own sending stalls, so its meter may read a lull and switch
        # back and up again: what this test checks is that every server applies the switch below
        assert next(t.decision.gear for t in rec.ticks if t.switched) == 1
        gears = [t.decision.gear for t in rec.ticks if t.switched]
        for device in ("d0", "d1"):
            assert sets[device][gen.number] >= switched, (device, switched, sets, gears)
        await asyncio.wait_for(_gather(reqs), timeout=PATIENCE_S)
        await rt.stop(grace_s=1.0)

    asyncio.run(main())


def test_many_device_plan_and_hot_swap_onto_new_devices(toy_profile: Profile) -> None:
    # 8 devices keep CI fast (each server is a process); benchmarks/bench_ray.py runs the 16-device plan.
    plan16 = fixed_plan(toy_profile, Cascade(("m0", "m1", "m2"), (0.3, 0.3)), _devices(8), max_wait_ms=5.0)
    plan_new = fixed_plan(toy_profile, Cascade(("m1", "m2"), (0.3,)), _devices(2, "e"), max_wait_ms=5.0)
    rec = Recorder()

    async def main() -> tuple[list[Answer | BaseException], list[Answer | BaseException]]:
        rt = RayBackend().emulated_runtime(toy_profile, plan16, observer=rec)
        assert isinstance(rt.placement, RayPlacement)
        await rt.start()
        first = await asyncio.wait_for(_gather(rt.submit(list(range(400)))), timeout=PATIENCE_S)
        rt.swap_plan(plan_new)  # two devices that have no server yet: started now, before they serve
        second = await asyncio.wait_for(_gather(rt.submit(list(range(100)))), timeout=PATIENCE_S)
        await asyncio.sleep(0.25)
        await rt.stop(grace_s=1.0)
        return first, second

    first, second = asyncio.run(main())
    assert all(isinstance(a, Answer) for a in first + second)
    assert {a.model for a in second if isinstance(a, Answer)} <= {"m1", "m2"}
    used = {b.device_name for b in rec.batches}
    assert len(used & {f"d{i}" for i in range(8)}) >= 6 and {"e0", "e1"} & used
    for i, a in enumerate(first):
        assert isinstance(a, Answer) and a.label == toy_profile.predictions[toy_profile.index(a.model), i]


def test_server_dead_for_good_fails_its_requests_instead_of_hanging(toy_profile: Profile) -> None:
    prof = _slow(toy_profile)
    plan = fixed_plan(prof, Cascade(("m0", "m1"), (0.3,)), _devices(1), max_wait_ms=5.0)

    async def main() -> list[Answer | BaseException]:
        rt = RayBackend(RayOptions(retries=1)).emulated_runtime(prof, plan)
        await rt.start()
        assert isinstance(rt.placement, RayPlacement)
        ray.kill(server_actors(rt)["d0"], no_restart=True)
        out = await asyncio.wait_for(_gather(rt.submit([1, 2, 3])), timeout=PATIENCE_S)
        await rt.stop(grace_s=0.5)
        return out

    out = asyncio.run(main())
    assert all(isinstance(e, ServingError) and e.status == 503 for e in out)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(900)  # beside 8 busy loops the server's Ray driver took over 240 s to become ready
def test_cli_serve_backend_ray_emulate_with_tritonclient(toy_profile: Profile, tmp_path: Path) -> None:
    import tritonclient.http as triton

    save_profile(toy_profile, tmp_path / "profile")
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), _devices(4), max_wait_ms=5.0)
    plan.save(tmp_path / "plan.json")
    address = ray.get_runtime_context().gcs_address  # join this session's instance instead of starting another
    cli = Path(sys.executable).parent / "cascadeserve"
    # A free port can be taken between our probe and the server's bind (Ray's workers bind ephemeral ports too),
    # so a bind failure is retried on a fresh port.
    # The server's stderr goes to a file, not a pipe: nobody reads a pipe while the server starts, and Ray's
    # warnings on a loaded machine can fill its 64 KiB and block the server before it binds.
    log = tmp_path / "serve.err"
    for _attempt in range(5):
        port = _port()
        cmd = [str(cli), "serve", "--backend", "ray", "--address", address, "--emulate"]
        cmd += ["--plan", str(tmp_path / "plan.json"), "--profile", str(tmp_path / "profile")]
        cmd += ["--port", str(port), "--name", "toy", "--grace-s", "1"]
        with log.open("w") as err_file:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            proc = subprocess.Popen(cmd, stderr=err_file, text=True, env=env)
        ready = _wait_ready(proc, port)
        if proc.poll() is None:
            break
        assert "address already in use" in log.read_text(), log.read_text()
    try:
        assert ready, f"not ready after {CLI_PATIENCE_S:.0f} s; its stderr:\n{log.read_text()[-4000:]}"
        client = triton.InferenceServerClient(
            f"127.0.0.1:{port}", connection_timeout=CLI_PATIENCE_S, network_timeout=CLI_PATIENCE_S
        )
        ids = np.arange(8, dtype=np.int64)
        inp = triton.InferInput("sample_id", [len(ids)], "INT64")
        inp.set_data_from_numpy(ids)
        res = client.infer("toy", [inp])
        models = [m.decode() for m in res.as_numpy("model")]
        for i, (label, m) in enumerate(zip(res.as_numpy("label"), models, strict=True)):
            assert label == toy_profile.predictions[toy_profile.index(m), i]
        assert res.get_response()["parameters"]["emulated"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=CLI_PATIENCE_S)
    err = log.read_text()
    assert proc.returncode == 0, err
    assert "ray backend" in err and "stopped" in err


def _wait_ready(proc: subprocess.Popen[str], port: int) -> bool:
    """Poll the server's readiness until it answers 200, exits, or CLI_PATIENCE_S passes (Ray starts in minutes on
    a busy box)."""
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < CLI_PATIENCE_S and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def test_hot_swap_in_the_same_iteration_as_sends_loses_nothing(toy_profile: Profile) -> None:
    # The front end sends a loop iteration's requests together, after the iteration; a swap in that iteration
    # drains the old generation on the servers first. Its requests (and the samples one server forwards to
    # another) must still be served by the old generation, by the model the cascade says, not failed or fallen back.
    prof = _slow(toy_profile, (2.0, 4.0))
    old = fixed_plan(prof, Cascade(("m0", "m1"), (0.3,)), _devices(2), min_queue=1, max_wait_ms=5.0)
    new = fixed_plan(prof, Cascade(("m1",), ()), _devices(2), min_queue=1, max_wait_ms=5.0)
    rec = Recorder()

    async def main() -> tuple[list[Answer | BaseException], list[list[int]]]:
        rt = RayBackend().emulated_runtime(prof, old, observer=rec, options=RuntimeOptions(max_in_flight=None))
        assert isinstance(rt.placement, RayPlacement)
        await rt.start()
        reqs = rt.submit(list(range(200)))
        rt.swap_plan(new)  # same iteration: the sends above leave after the servers were told to drain
        reqs += rt.submit(list(range(200, 260)))
        results = await asyncio.wait_for(_gather(reqs), timeout=PATIENCE_S)
        await asyncio.sleep(0.3)  # the retire broadcast lands
        gens = [(await h.sync.remote({}))["gens"] for h in server_actors(rt).values()]
        await rt.stop(grace_s=1.0)
        return results, gens

    results, gens = asyncio.run(main())
    errors = [a for a in results if not isinstance(a, Answer)]
    assert errors == [], errors[:3]
    answers = [a for a in results if isinstance(a, Answer)]
    assert not any(a.fallback for a in answers)
    for i, a in enumerate(answers[:200]):  # the old plan's cascade answered them: m0 where sure, else m1
        assert a.model == ("m0" if is_sure(float(prof.certainties[0, i]), 0.3) else "m1"), (i, a.model)
    assert {a.model for a in answers[200:]} == {"m1"}
    assert rec.n_admitted == 260 and rec.n_answered == 260 and rec.n_duplicates == 0
    assert gens == [[1], [1]]  # the old generation was dropped on every server once answered


def test_ray_refuses_a_non_aimd_batch_limit_before_starting_anything(toy_profile: Profile) -> None:
    from cascadeserve.policy.quantile import QuantileBatchLimit

    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), _devices(1))
    opts = RuntimeOptions(batch_limit=QuantileBatchLimit(0.01))
    with pytest.raises(ValueError, match="batch_limit"):
        RayRuntime(plan, toy_profile.model_names, profile=toy_profile, options=opts)


def test_a_threshold_change_reaches_every_server(toy_profile: Profile) -> None:
    """Online tuning's hot swap on Ray: broadcast to every server like a gear switch, and then their exits use it."""
    from cascadeserve.policy.tuning import OnlineTuning, ThresholdDecision

    plan = two_gear_plan(low_high=1e5, max_wait_ms=5.0)  # gear 0 (m0 -> m1) throughout
    opts = RuntimeOptions(tuning=lambda tables: OnlineTuning.for_plan(tables, toy_profile, min_records=10**9))

    async def main() -> tuple[list[list[tuple[float, ...]]], list[Answer | BaseException]]:
        rt = RayBackend().emulated_runtime(toy_profile, plan, options=opts)
        await rt.start()
        gen = rt.current
        assert gen.tuning is not None and gen.tables.thresholds_of(0) == (0.5,)
        gen.apply_thresholds(ThresholdDecision(0, (0.5,), (1.0,), 0.9, 0.95, 1.0, "periodic", 0.0))
        handles = server_actors(rt)
        seen: list[list[tuple[float, ...]]] = []
        for _ in range(200):  # fire and forget, as a gear switch: wait (generously) until both servers have it
            seen = [list(map(tuple, await h.thresholds.remote(gen.number))) for h in handles.values()]
            if all(s[0] == (1.0,) for s in seen):
                break
            await asyncio.sleep(0.05)
        reqs = [r for i in range(20) for r in rt.submit([i])]
        answers = await asyncio.wait_for(_gather(reqs), timeout=PATIENCE_S)
        await rt.stop(grace_s=1.0)
        return seen, answers

    seen, answers = asyncio.run(main())
    assert len(seen) == 2 and all(s[0] == (1.0,) for s in seen)
    # threshold 1.0: m0 is sure of nothing short of certainty 1, so (almost) everything goes on to m1
    certain = toy_profile.certainties[0, :20] >= 1.0
    assert all(isinstance(a, Answer) for a in answers)
    assert [a.model for a in answers if isinstance(a, Answer)] == ["m0" if c else "m1" for c in certain]
