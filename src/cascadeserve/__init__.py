"""cascadeserve: serve predictions from model cascades under bursty load.

An offline planner computes a gear plan (placement of replicas on devices and, per QPS range, a cascade with
thresholds, batch triggers and a load split); an online runtime measures QPS and switches gears. The simulator
and the runtime drive the same pure policy core (:mod:`cascadeserve.policy`).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
