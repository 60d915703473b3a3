"""``serve --replan auto`` on the Ray backend: over real HTTP on 127.0.0.1, with the devices as Ray actors of the
real local instance, a load drift starts a re-plan in a child process while the server answers, the new plan is
swapped in on the actors mid-stream, and every accepted request is answered exactly once (the same run as the
local backend's test in tests/http/test_replan.py)."""

from __future__ import annotations

import pytest
from tests.http.test_replan import auto_swap_run

from cascadeserve.profile import Profile

pytest.importorskip("ray")
from cascadeserve.backends.ray import RayBackend

pytestmark = pytest.mark.usefixtures("ray_session")


@pytest.mark.timeout(900)  # the re-plan's own bound is 600 s
def test_auto_swaps_a_replanned_plan_on_ray_and_answers_everything(real_profile: Profile) -> None:
    auto_swap_run(real_profile, RayBackend())
