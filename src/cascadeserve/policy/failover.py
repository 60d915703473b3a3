"""The failover decision: what becomes of a request whose replica's server was lost before answering it.

A distributed backend (Ray) sends requests to the process that holds their replica. When that process dies, or
restarts and lost the plan generation, every request it had and did not answer gets one of three outcomes, in this
order:

* **fallback**: an earlier stage already ran on it, so it is answered now with that stage's prediction (flagged
  as a fallback, as a deadline would);
* **retry**: no stage ran, a retry is left and its deadline has not passed: it is re-sent to the replica that
  :meth:`~cascadeserve.policy.PlanTables.failover` picks (another replica of the same model on another device, or
  the same one once the backend restarted its server);
* **fail**: otherwise.

:func:`on_server_lost` makes the decision; the backend applies it (``backends/ray/outbox.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cascadeserve.policy.tables import PlanTables

__all__ = ["FailoverDecision", "on_server_lost"]


@dataclass(frozen=True, slots=True)
class FailoverDecision:
    """One lost request's outcome: ``"fallback"``, ``"retry"`` on ``replica`` (the lost replica itself when no other
    device serves its model: the backend waits for its server to restart), or ``"fail"``."""

    action: Literal["fallback", "retry", "fail"]
    replica: int = -1


_FALLBACK = FailoverDecision("fallback")
_FAIL = FailoverDecision("fail")


def on_server_lost(
    tables: PlanTables,
    *,
    gear: int,
    replica: int,
    ran_a_stage: bool,
    attempt: int,
    retries: int,
    now: float,
    deadline: float,
) -> FailoverDecision:
    """The outcome of a request of ``gear`` that was on ``replica`` when its server was lost (``attempt``: how many
    times it was re-sent already, at most ``retries``)."""
    if ran_a_stage:
        return _FALLBACK
    if attempt < retries and now < deadline:
        alt = tables.failover(gear, replica, int(tables.replica_device[replica]))
        return FailoverDecision("retry", alt)
    return _FAIL
