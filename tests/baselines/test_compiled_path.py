"""Every system of a comparison replays on the compiled simulator loop (a cost grid at the paper's scale needs it)."""

from __future__ import annotations

import pytest
from tests.baselines.tiny import workload

from cascadeserve.baselines import System, all_systems
from cascadeserve.traces import constant


@pytest.mark.parametrize("system", all_systems(), ids=lambda s: s.name)
def test_every_setting_of_every_system_runs_compiled(system: System) -> None:
    w = workload(constant(300, 2.0), lats=(100.0,), accs=(0.6, 0.9))
    ran = 0
    for cfg in system.configs(w, 2)[:3]:  # a few settings of each kind keep the test short
        dep = system.deploy(w, 2, cfg)
        if dep is None:
            continue
        assert dep.simulate(w.trace.arrivals).engine == "compiled", cfg
        ran += 1
    assert ran > 0
