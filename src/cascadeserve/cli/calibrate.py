"""``cascadeserve profile calibrate``: a profile's runtimes scaled to what a live server measured.

Serve a plan made from the profile (``serve --models``), put a realistic load on it (``bench``, or real traffic),
then::

    cascadeserve profile calibrate PROFILE --server http://127.0.0.1:8000 --out PROFILE-calibrated

reads ``GET /v2/cascade/costs`` (per model, the median measured / profiled batch time since the server started)
and writes a new profile whose runtimes are multiplied by those factors, with a ``calibration`` line saying by how
much and where (:mod:`cascadeserve.profile.calibration`). Plan from the new profile: its plans say in their
``costs`` note which costs they were made with. The input profile is never rewritten.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from cascadeserve.cli.profile import ProfileDir, profile_app
from cascadeserve.cli.root import console, err_console, print_json
from cascadeserve.errors import CascadeServeError
from cascadeserve.profile import calibrate, load_profile, save_profile

__all__ = ["calibrate_cmd", "server_factors"]


def server_factors(snapshot: dict[str, Any], min_batches: int) -> tuple[dict[str, float], list[str]]:
    """The factors worth applying from a ``/v2/cascade/costs`` answer, and one note per model left out."""
    factors: dict[str, float] = {}
    notes: list[str] = []
    for m in snapshot.get("models", []):
        f, n = m.get("factor_vs_profile"), int(m.get("batches") or 0)
        if f is None or n < min_batches:
            notes.append(f"model {m['model']!r}: {n} batches (fewer than --min-batches {min_batches}): unchanged")
        else:
            factors[str(m["model"])] = float(f)
    return factors, notes


@profile_app.command("calibrate")
def calibrate_cmd(
    directory: ProfileDir,
    server: Annotated[
        str, typer.Option(help="A live cascadeserve server serving this profile, e.g. http://127.0.0.1:8000.")
    ],
    out: Annotated[Path, typer.Option(help="New profile directory to write (the input is never rewritten).")],
    min_batches: Annotated[
        int, typer.Option(help="Models with fewer measured batches keep their runtimes.", min=1)
    ] = 20,
    token: Annotated[
        str | None, typer.Option(envvar="CASCADESERVE_AUTH_TOKEN", help="Bearer token, if the server needs one.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Scale a profile's runtimes by the batch costs a live server measured (GET /v2/cascade/costs)."""
    prof = load_profile(directory)
    if out.resolve() == directory.resolve():
        raise CascadeServeError(f"--out: {out} is the input profile; give a new directory")
    url = server.rstrip("/") + "/v2/cascade/costs"
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        r = httpx.get(url, headers=headers, timeout=30.0)
    except httpx.HTTPError as e:
        raise CascadeServeError(f"--server: cannot read {url}: {e}") from None
    if r.status_code != 200:
        raise CascadeServeError(f"--server: {url} answered {r.status_code}: {r.text.strip()[:200]}")
    snap = r.json()
    if snap.get("profile") != prof.name:
        err_console.print(
            f"warning: the server serves profile {snap.get('profile')!r}, not {prof.name!r}", highlight=False
        )
    factors, notes = server_factors(snap, min_batches)
    unknown = sorted(set(factors) - set(prof.model_names))
    if unknown:
        raise CascadeServeError(f"--server: it measured model(s) {', '.join(unknown)}, which {directory} lacks")
    if not factors:
        raise CascadeServeError(f"--server: no model has {min_batches} measured batches yet; put load on it first")
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    total = sum(int(m.get("batches") or 0) for m in snap.get("models", []))
    new = calibrate(prof, factors, source=f"{server} ({total} batches, {when})")
    save_profile(new, out)
    for n in notes:
        err_console.print(n, highlight=False)
    if as_json:
        print_json({"out": str(out), "factors": factors, "calibration": new.calibration})
        return
    console.print(f"wrote {out}: {new.calibration}", highlight=False)
