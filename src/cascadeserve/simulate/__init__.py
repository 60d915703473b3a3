"""The simulator: replays a trace against a gear plan (:func:`simulate`, :mod:`.engine`).

Its reference engine is the serving runtime on emulated devices and a virtual clock (:mod:`.reference`); its
compiled engine replays the same trajectory in numba (:mod:`.compiled`, :mod:`.loop`) for the runs that need speed.
Optional policy hooks of :func:`simulate` (Clipper's serving layer, the baselines of :mod:`cascadeserve.baselines`,
online tuning, load drift), each applied as the server applies it, all off by default:

* ``batch_limit`` (an adaptive :class:`~cascadeserve.policy.adaptive.BatchLimit`: AIMD or the p99 fit): caps
  each batch at the replica's current limit and reports every batch's runtime and size back to it. Without one,
  the plan's ``batching`` field builds it (:func:`~cascadeserve.policy.adaptive.batch_limit_for`);
* ``cache`` (:class:`~cascadeserve.policy.cache.PredictionCache` keyed by sample id): an arrival whose sample
  the cache holds is answered at its arrival and never queued; every cascade answer is stored;
* ``admission`` (:class:`~cascadeserve.policy.AdmissionPolicy`): each arrival is admitted or shed against the
  requests in flight at its arrival, as the server's admission does; the QPS meter counts every arrival, shed
  ones too (the gear follows the offered load);
* ``slowdowns`` (:class:`~cascadeserve.profile.slowdown.Slowdowns`, a fault hook): multiplies the runtime of a
  batch starting on a device after its slowdown time, as the emulated devices do;
* ``gear_schedule`` (:class:`~cascadeserve.policy.GearSchedule`): the gear of every tick, decided in advance
  (an autoscaler given the future load, Cocktail+), in place of the measured-QPS selector;
* ``qps_scale`` (one factor per tick, from :class:`~cascadeserve.policy.replan.LoadDrift`): appendix C.2's
  measured-QPS scaling estimated online; the gear selector multiplies tick ``w``'s QPS by ``qps_scale[w]``
  (:mod:`cascadeserve.simulate.replan` computes it and runs plan swaps);
* ``tuning`` (:class:`~cascadeserve.policy.tuning.OnlineTuning`): audit sampling of early exits (they also run
  the remaining stages, answered already) and Apparate-style threshold tuning every tick.
"""

from __future__ import annotations

from cascadeserve.simulate.engine import simulate
from cascadeserve.simulate.result import BatchRecord, SimResult

__all__ = ["BatchRecord", "SimResult", "simulate"]
