"""``cascadeserve profile calibrate``: a profile's runtimes scaled to what a live server measured.

Two ways to measure, one result:

* under serving conditions, here and now::

      cascadeserve profile calibrate --profile PROFILE --models models.yaml --validation DATA --devices 2 --out NEW

  serves every model of the family with the real HTTP server on 127.0.0.1 and drives it with real inputs for a few
  seconds (:func:`cascadeserve.eval.hostcost.measure_host_costs`); with ``--plan PLAN`` it serves that plan (made
  from ``--profile``) as planned, at a quarter to all of its top QPS, instead of every model on every request
  (the plan's own costs: simulate that plan with them, ``docs/plans-that-hold.md``);
* from a server under real load: serve a plan made from the profile (``serve --models``), load it (``bench``, or
  real traffic), then ``cascadeserve profile calibrate --profile PROFILE --url http://127.0.0.1:8000 --out NEW`` reads
  ``GET /v2/cascade/costs`` (per model, the mean measured / profiled batch time since the server started; on
  ``--backend ray`` also the process hop as serving saw it, which replaces the profile's ``ray_hop_ms`` and
  ``ray_hop_p95_ms``). With ``--bench RESULT.json`` (``cascadeserve bench --json`` of that run) it also records the
  front door: what the client saw of each request beyond the server's own time, which every simulation charges.
  From a served run it also records each model's batch spread (``--no-spread``: not), which every simulation draws.

Either way it writes a new profile whose runtimes are multiplied by those factors, with a ``calibration`` line
saying by how much and where (:mod:`cascadeserve.profile.calibration`). Plan from the new profile: its plans say in
their ``costs`` note which costs they were made with. The input profile is never rewritten.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import httpx
import typer

from cascadeserve.api.steps import Calibration, calibrate_here, write_calibrated
from cascadeserve.cli.defaults import WorkloadOpt, from_workload
from cascadeserve.cli.profile import ProfileDir, profile_app
from cascadeserve.cli.root import console, err_console, print_json
from cascadeserve.errors import CascadeServeError
from cascadeserve.profile import Profile, Vote, load_profile

if TYPE_CHECKING:  # the measuring modules load the HTTP stack: imported where used, so --help stays quick
    pass

__all__ = ["calibrate_cmd"]


@profile_app.command("calibrate")
def calibrate_cmd(
    ctx: typer.Context,
    profile: ProfileDir,
    out: Annotated[Path, typer.Option(help="New profile directory to write (the input is never rewritten).")],
    url: Annotated[
        str | None, typer.Option(help="Read the costs of a live server serving this profile (http://HOST:PORT).")
    ] = None,
    models: Annotated[
        Path | None, typer.Option(help="Or measure here: serve these models (models config YAML) and load them.")
    ] = None,
    validation: Annotated[
        str | None, typer.Option(help="With --models: the inputs to send (as profile measure --validation).")
    ] = None,
    devices: Annotated[int, typer.Option(help="With --models: devices to serve on (as you will).", min=1)] = 2,
    duration_s: Annotated[float, typer.Option(help="With --models: how long to load the server (s).", min=1.0)] = 8.0,
    plan: Annotated[
        Path | None,
        typer.Option(
            help="With --models: serve this plan (made from --profile) as planned, up to its top QPS, instead of "
            "every model on every request; models it runs fewer than --min-batches times keep their runtimes."
        ),
    ] = None,
    min_batches: Annotated[
        int,
        typer.Option(
            help="Models with fewer measured batches keep their runtimes (on Ray: the hop, with fewer first-stage "
            "answers).",
            min=1,
        ),
    ] = 20,
    auth_token: Annotated[
        str | None, typer.Option(envvar="CASCADESERVE_AUTH_TOKEN", help="Bearer token, if the server needs one.")
    ] = None,
    bench: Annotated[
        Path | None,
        typer.Option(
            help="A `bench --json` result of a run against the server: record its front door (what the client saw "
            "of each request beyond the server's time, mean and p95), which every simulation then charges."
        ),
    ] = None,
    spread: Annotated[
        bool,
        typer.Option(
            help="With --url or --plan: record each model's batch spread (how its batches scatter around their "
            "rule), which every simulation then draws batch by batch."
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    workload: WorkloadOpt = None,
) -> None:
    """Scale a profile's runtimes by what batches cost when served: measured here (--models) or read from a live
    server (--url, GET /v2/cascade/costs; on Ray also its process hop); --bench adds the front door a client saw."""
    if url is not None and from_workload(ctx, "models"):
        models = None  # --workload --url: read that server; the workload's models are only measured without --url
    prof = load_profile(profile)
    if out.resolve() == profile.resolve():
        raise CascadeServeError(f"--out: {out} is the input profile; give a new directory")
    if (url is None) == (models is None):
        raise CascadeServeError("give --url URL (a live server's costs) or --models and --validation (measure here)")
    if plan is not None and models is None:
        raise CascadeServeError("--plan: needs --models and --validation (the plan is served here)")
    door = None if bench is None else _front_door(bench)
    if models is not None:
        if validation is None:
            raise CascadeServeError("--validation: needed with --models (the inputs to send)")
        measured = calibrate_here(
            prof, models, validation, devices=devices, seconds=duration_s, plan_path=plan, min_batches=min_batches,
            say=_say,
        )  # fmt: skip
        if not spread:
            measured.factors.spread.clear()
        _write(prof, measured, out, as_json, front_door=door)
        return
    assert url is not None
    server, url = url, url.rstrip("/") + "/v2/cascade/costs"
    headers = {"authorization": f"Bearer {auth_token}"} if auth_token else {}
    try:
        r = httpx.get(url, headers=headers, timeout=30.0)
    except httpx.HTTPError as e:
        raise CascadeServeError(f"--url: cannot read {url}: {e}") from None
    if r.status_code != 200:
        raise CascadeServeError(f"--url: {url} answered {r.status_code}: {r.text.strip()[:200]}")
    snap = r.json()
    if snap.get("profile") != prof.name:
        err_console.print(
            f"warning: the server serves profile {snap.get('profile')!r}, not {prof.name!r}", highlight=False
        )
    from cascadeserve.eval.hostcost import snapshot_hop
    from cascadeserve.profile.calibration import snapshot_factors

    got = snapshot_factors(snap, min_batches)
    if not spread:
        got.spread.clear()
    factors, notes = got.factors, got.notes
    for name in [m for m in factors if Vote.parse(m, prof.model_names) is not None]:
        # a vote stage's costs are rebuilt from its members' each time a plan names it: there is nothing to scale
        got.drop(name)
        notes.append(f"vote stage {name!r}: unchanged (its costs are its members'; serve them to calibrate them)")
    unknown = sorted(set(factors) - set(prof.model_names))
    if unknown:
        raise CascadeServeError(f"--url: it measured model(s) {', '.join(unknown)}, which {profile} lacks")
    if not factors:
        raise CascadeServeError(f"--url: no model has {min_batches} measured batches yet; put load on it first")
    total = sum(int(m.get("batches") or 0) for m in snap.get("models", []))
    hop = snapshot_hop(snap, min_batches)
    if hop is None and snap.get("backend") == "ray":
        notes.append(f"Ray hop: fewer than --min-batches {min_batches} first-stage answers measured: unchanged")
    _write(prof, Calibration(got, f"{server} ({total} batches, {_now()})"), out, as_json, hop, door)


def _front_door(path: Path) -> tuple[float, float]:
    """The front door's mean and p95 (ms) from a ``bench --json`` result."""
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CascadeServeError(f"--bench: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        mean, p95 = float(doc["front_door_ms"]), float(doc["front_door_p95_ms"])
    except (KeyError, TypeError, ValueError):
        raise CascadeServeError(
            f"--bench: {path} has no front_door_ms and front_door_p95_ms (a `cascadeserve bench --json` result)"
        ) from None
    if not (0 <= mean <= p95 < float("inf")):
        raise CascadeServeError(f"--bench: {path}: front_door_ms {mean!r} and front_door_p95_ms {p95!r} are not usable")
    return mean, p95


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _say(line: str) -> None:
    err_console.print(line, highlight=False)


def _write(
    prof: Profile,
    measured: Calibration,
    out: Path,
    as_json: bool,
    hop: tuple[float, float] | None = None,
    front_door: tuple[float, float] | None = None,
) -> None:
    new = write_calibrated(prof, measured, out, hop=hop, front_door=front_door, say=_say)
    got = measured.factors
    if as_json:
        doc: dict[str, object] = {"out": str(out), "factors": got.factors, "busy_factors": got.busy}
        doc["size_factors"] = {m: {str(b): f for b, f in by.items()} for m, by in got.sizes.items()}
        doc["batch_spread"] = got.spread
        doc["calibration"] = new.calibration
        if hop is not None:
            doc |= {"ray_hop_ms": hop[0], "ray_hop_p95_ms": hop[1]}
        if front_door is not None:
            doc |= {"front_door_ms": front_door[0], "front_door_p95_ms": front_door[1]}
        print_json(doc)
        return
    console.print(f"wrote {out}: {new.calibration}", highlight=False, soft_wrap=True)
