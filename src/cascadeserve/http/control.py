"""The control plane's guards: bearer tokens, and the checks a hot-swapped plan must pass against the deployment.

**Tokens.** Mutating endpoints (``PUT /v2/cascade/plan``, and any later one) are off unless the server was given an
admin token; with one, a request must carry ``Authorization: Bearer <token>``. No header: 401 (with
``WWW-Authenticate: Bearer``); a wrong token, or the endpoint switched off: 403. An optional inference token guards
everything but the health probes and the OpenAPI document the same way (the admin token is accepted there too).
Tokens are compared in constant time.

**Plans.** A plan that parses is not yet a plan this deployment can serve. :func:`check_plan` refuses (422, naming
the field) a plan that names a device the deployment lacks or gives a device more memory than it has, names a
model that is not loaded here (or, through ``extra``, fails the profile's checks), or could *starve* requests: a
replica whose batch trigger waits for more requests than admission will ever let in (every batch would then wait
the full max wait), or a max wait that, over a gear's stages, holds a request longer than admission allows (or
longer than readiness takes for a stall).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Collection, Mapping

from cascadeserve.errors import CascadeServeError
from cascadeserve.http.tuning import drop_tuning_report
from cascadeserve.plan import DEFAULT_MAX_WAIT_MS, GearPlan

__all__ = ["AuthError", "PlanRejected", "check_bearer", "check_plan", "parse_plan"]


class AuthError(Exception):
    """A request without the right bearer token (``status`` 401 or 403)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class PlanRejected(Exception):
    """A plan this deployment will not serve (HTTP 422); the message names the field."""


def check_bearer(header: str | None, tokens: Collection[str], *, what: str) -> None:
    """Pass when ``header`` is ``Bearer <t>`` for one of ``tokens``; raise :class:`AuthError` otherwise."""
    if not header:
        raise AuthError(f"{what} needs 'Authorization: Bearer <token>'", 401)
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise AuthError(f"{what} needs 'Authorization: Bearer <token>'", 401)
    ok = False
    for t in tokens:  # no early exit: the time taken says nothing about which token nearly matched
        ok |= hmac.compare_digest(given.strip().encode(), t.encode())
    if not ok:
        raise AuthError(f"{what}: the token is not valid", 403)


def parse_plan(body: bytes) -> GearPlan:
    """A plan from a request body, or :class:`PlanRejected` naming the field."""
    text = body.decode("utf-8", errors="replace")
    text = drop_tuning_report(text)  # a plan read from GET under serve --tune may be PUT back as it is
    try:
        return GearPlan.from_json(text)
    except CascadeServeError as e:
        raise PlanRejected(f"plan: {e}") from None
    except RecursionError:
        raise PlanRejected("plan: JSON nested too deeply") from None


def check_plan(
    plan: GearPlan,
    deployed: GearPlan,
    models: Collection[str],
    *,
    admission_limit: int | None,
    wait_budget_ms: float | None = None,
    stall_ms: float | None = None,
    extra: Callable[[GearPlan], None] | None = None,
) -> None:
    """Refuse ``plan`` (:class:`PlanRejected`) unless ``deployed``'s devices and ``models`` can serve it without
    starving a request."""
    have: Mapping[str, float] = {d.name: d.memory_mb for d in deployed.devices}
    for i, d in enumerate(plan.devices):
        if d.name not in have:
            raise PlanRejected(
                f"devices.{i}.name: device {d.name!r} is not in this deployment (it has {', '.join(have)})"
            )
        if d.memory_mb > have[d.name] + 1e-9:
            raise PlanRejected(
                f"devices.{i}.memory_mb: {d.memory_mb:g} MB is more than device {d.name!r} has ({have[d.name]:g} MB)"
            )
    loaded = set(models)
    for i, r in enumerate(plan.replicas):
        if r.model not in loaded:
            raise PlanRejected(f"replicas.{i}.model: model {r.model!r} is not loaded on this server")
    wait_ms = DEFAULT_MAX_WAIT_MS if plan.max_wait_ms is None else plan.max_wait_ms
    if stall_ms is not None and wait_ms >= stall_ms:
        raise PlanRejected(
            f"max_wait_ms: {wait_ms:g} ms is at least the {stall_ms:g} ms after which a waiting request marks its "
            "device stalled (and the server not ready)"
        )
    for g, gear in enumerate(plan.gears):
        if wait_budget_ms is not None and wait_ms * len(gear.models) > wait_budget_ms:
            raise PlanRejected(
                f"max_wait_ms: {wait_ms:g} ms at each of gear {g}'s {len(gear.models)} stages could hold a request "
                f"for {wait_ms * len(gear.models):g} ms, over the {wait_budget_ms:g} ms that admission allows"
            )
        for j, rep in enumerate(gear.replicas):
            if admission_limit is not None and rep.min_queue > admission_limit:
                raise PlanRejected(
                    f"gears.{g}.replicas.{j}.min_queue: {rep.min_queue} is more than admission ever lets in "
                    f"({admission_limit} requests in flight): {rep.id!r} could never fill a batch"
                )
    if extra is not None:
        try:
            extra(plan)
        except CascadeServeError as e:
            raise PlanRejected(f"plan: {e}") from None
