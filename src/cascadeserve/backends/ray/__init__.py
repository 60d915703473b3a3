"""The Ray backend: the same runtime, with one inference-server actor per device of the plan (paper §5, Fig. 4).

Topology::

                 HTTP (V2)                     Ray actor calls (streaming answers back)
    clients ───────────────► front end ─────────────► server[d0] ──forward──► server[d1]
                             (producer)  ◄───answers── (consumer)  ◄─answers── (consumer)
                                 │  gear switches (broadcast on switch, and every tick with the Q0 poll)
                                 └───────────────────► every server

* **Front end = producer.** The process serving HTTP runs a plain :class:`~cascadeserve.runtime.Runtime` (built
  by :func:`RayRuntime`) whose placement puts every replica on a server actor. It does what the paper's producer
  does: admission control, the QPS meter and the gear selector (the runtime's own :class:`Producer`), and the
  first-stage split (the generation's SWRR routers). It sends each request straight to the server actor that holds
  the chosen first-stage replica; requests of one event-loop iteration bound for one replica travel in one call.
* **Inference server = consumer.** A Ray actor per device (``num_cpus``/``num_gpus``/custom resources from the
  plan's device) holds its device, the queues of the replicas placed on it and a
  :class:`~cascadeserve.runtime.consumer.Consumer`: the runtime's classes, unchanged, firing batches by the policy
  core's batch trigger and forwarding unsure samples by its certainty rule (composed, not subclassed: the
  runtime's :class:`~cascadeserve.runtime.LocalPlacement` restricted to its device). It loads the models of its
  replicas in its constructor, exactly as the placement says (a hot-swapped plan's new replicas load when the plan
  is installed, before it serves), never on a request.
* **Forwarding is server to server.** A sample that stage *k* is unsure of goes from the server of stage *k*
  directly to the server of the stage *k+1* replica that the sender's routers pick; the answer streams back along
  the same chain (``accept`` is a streaming generator, so a sample answered early does not wait for its call-mates).
  Nothing funnels through one actor: each server sees only the traffic of its own replicas, and the front end only
  first-stage sends and final answers. The front end is a single producer per HTTP process, as in the paper; more
  HTTP processes would each run their own producer (not built: they would also need to agree on one gear).
* **Gears.** On a switch the producer broadcasts ``set_gear`` to every server (one actor call each, so it lands
  well within one 100 ms tick), and every tick it polls each server with the gears of all live generations (a
  repair path: a restarted server gets its gear back) and reads back the first stage's queue lengths, whose sum is
  the Q0 of the α·Q0 hysteresis (one tick old, the price of not centralising the queues).
* **Thresholds** re-tuned online (``serve --tune``) are broadcast like a gear: ``set_thresholds`` to every server,
  and a server the front end (re)installs a plan on gets the thresholds in force. Not built yet: audit
  continuations and whole records on the servers, so on Ray the front end's tuner only sees what reaches it
  (labels for whole records): the thresholds change where a decision is applied (``Generation.apply_thresholds``).
* **Hot-swap** works as on the local backend: the new plan becomes a new generation on the front end and on every
  server (servers for new devices are started), the old one drains everywhere, and no request moves between
  generations.
* **Faults.** Servers are started with ``max_restarts``; Ray restarts a dead one (its constructor reloads its
  replicas; the front end's next poll re-installs the plans it lost). A caller whose call to a dead server fails
  re-routes what it sent: a request no stage has answered yet is retried on another replica of the same model
  (or, if there is none, on the restarted server), up to ``retries`` times; a request that an earlier stage
  already ran is answered with that stage's prediction and ``fallback: true``. Deadlines hold on the server that
  holds the request; the front end keeps a safety deadline ``deadline_slack_s`` later, so no request hangs.

Emulated devices (``--emulate``) ask for no CPU, so a 16-device plan fits on a 2-core Ray instance. Clocks:
servers read ``time.monotonic`` in their own process; answers are re-stamped with the receiver's clock, so
latencies are measured on the front end's clock only.

Modules, each named after its noun: :mod:`~cascadeserve.backends.ray.options` (options, errors, the wire
encoding), :mod:`~cascadeserve.backends.ray.outbox` (sending, streaming answers back, recovery),
:mod:`~cascadeserve.backends.ray.transport` (the front end's and the servers' transports),
:mod:`~cascadeserve.backends.ray.fleet` (the server actors as the front end sees them),
:mod:`~cascadeserve.backends.ray.server` (the inference server actor), :mod:`~cascadeserve.backends.ray.frontend`
(the front end's placement, :func:`RayRuntime`, :func:`server_actors`) and :mod:`~cascadeserve.backends.ray.backend`
(:class:`RayBackend`, :func:`model_sources`).
"""

from __future__ import annotations

from cascadeserve.backends.ray.backend import RayBackend, model_sources
from cascadeserve.backends.ray.frontend import RayRuntime, server_actors
from cascadeserve.backends.ray.options import ModelSource, RayOptions, ServerLost
from cascadeserve.backends.ray.server import InferenceServer

__all__ = [
    "InferenceServer",
    "ModelSource",
    "RayBackend",
    "RayOptions",
    "RayRuntime",
    "ServerLost",
    "model_sources",
    "server_actors",
]
