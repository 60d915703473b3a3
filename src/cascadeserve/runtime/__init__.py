"""The online runtime (paper §5): an asyncio producer and per-device consumers driving the shared policy core.

The producer admits requests under the current gear, routes them by the gear's shares and re-picks the gear
every tick with the α·Q0 hysteresis; a consumer per device fires batches when the batch trigger says so and
forwards uncertain samples down each request's own cascade. The simulator's two optional policy hooks, an AIMD
batch limit and a gear schedule, come in through :class:`RuntimeOptions` and act exactly as there. Devices are
emulated (profiled runtimes and recorded answers) or local (real models on a worker thread per device); where they
live is an injected :class:`Placement` (:class:`LocalPlacement`: this process), the seam other backends use. Time
comes from an injected clock: on a :class:`VirtualClock` (:func:`run_virtual`), which jumps from event to event,
the runtime on emulated devices is the reference simulator (:mod:`cascadeserve.simulate.reference`).
"""

from __future__ import annotations

from cascadeserve.runtime.backend import Backend, LocalBackend
from cascadeserve.runtime.clock import Clock, FakeClock, MonotonicClock, call_later
from cascadeserve.runtime.device import BatchOutput, Device, EmulatedDevice, ModelFn, ThreadDevice
from cascadeserve.runtime.factory import emulated_runtime, local_runtime
from cascadeserve.runtime.generation import Generation
from cascadeserve.runtime.loading import InputSpec, ModelConfig, load_model, load_model_config
from cascadeserve.runtime.observer import BatchEvent, Fanout, NullObserver, Observer, Recorder, TickEvent
from cascadeserve.runtime.placement import LocalPlacement, Placement
from cascadeserve.runtime.request import (
    Answer,
    ClientGone,
    DeadlineExceeded,
    ModelFailed,
    Overloaded,
    Request,
    RuntimeStopped,
    ServingError,
    TooLarge,
)
from cascadeserve.runtime.server import Runtime, RuntimeOptions, answer_early, arm_deadline
from cascadeserve.runtime.transport import LocalTransport, Transport
from cascadeserve.runtime.virtual import VirtualClock, run_virtual

__all__ = [
    "Answer",
    "Backend",
    "BatchEvent",
    "BatchOutput",
    "ClientGone",
    "Clock",
    "DeadlineExceeded",
    "Device",
    "EmulatedDevice",
    "FakeClock",
    "Fanout",
    "Generation",
    "InputSpec",
    "LocalBackend",
    "LocalPlacement",
    "LocalTransport",
    "ModelConfig",
    "ModelFailed",
    "ModelFn",
    "MonotonicClock",
    "NullObserver",
    "Observer",
    "Overloaded",
    "Placement",
    "Recorder",
    "Request",
    "Runtime",
    "RuntimeOptions",
    "RuntimeStopped",
    "ServingError",
    "ThreadDevice",
    "TickEvent",
    "TooLarge",
    "Transport",
    "VirtualClock",
    "answer_early",
    "arm_deadline",
    "call_later",
    "emulated_runtime",
    "load_model",
    "load_model_config",
    "local_runtime",
    "run_virtual",
]
