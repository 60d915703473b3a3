"""Backend fixtures: ``backend`` (local, ray) and ``ray_session`` (one Ray instance per test session)."""

from tests.backends.backend_fixtures import backend, ray_session

__all__ = ["backend", "ray_session"]
