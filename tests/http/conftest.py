"""The HTTP behaviour tests run on both backends: ``backend`` is local or ray (see tests/backends)."""

from tests.backends.backend_fixtures import backend, ray_session

__all__ = ["backend", "ray_session"]
