"""Key-value stores for ``lookup``: an embedded in-memory store (the default) and Redis, behind one interface.

A :class:`KVStore` maps ``str`` keys to Python objects: ``put(key, value)``, ``get(key)`` (``KeyError`` when
missing), ``delete(key)``. :class:`MemoryStore` is a thread-safe dict in this process; on Ray each worker gets a
copy taken at deploy time (later writes are not seen there: use Redis for shared, changing state).
:class:`RedisStore` keeps pickled values in a Redis server (``pip install 'cascadeserve[redis]'``); it pickles
as its connection settings, so Ray workers open their own connections to the same server.

Workers put a :class:`WorkerCache` in front of the store: what a worker has fetched stays in its memory (least
recently used evicted past ``capacity_bytes``), which is what locality-aware dispatch exploits.
"""

from __future__ import annotations

import pickle
import sys
import threading
from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

import numpy as np

from cascadeserve.flow.schema import FlowError

__all__ = ["KVStore", "MemoryStore", "RedisStore", "WorkerCache", "size_of"]


@runtime_checkable
class KVStore(Protocol):
    def get(self, key: str) -> Any: ...

    def put(self, key: str, value: Any) -> None: ...

    def delete(self, key: str) -> None: ...


class MemoryStore:
    """The embedded default: a dict behind a lock."""

    def __init__(self, items: dict[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(items or {})
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        with self._lock:
            return self._data[key]

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._data[key] = value

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def __len__(self) -> int:
        return len(self._data)

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"items": dict(self._data)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._data = state["items"]
        self._lock = threading.Lock()


class RedisStore:
    """Values pickled under ``prefix + key`` in a Redis server, reached by ``url`` or a unix socket path."""

    def __init__(self, url: str | None = None, *, unix_socket_path: str | None = None, prefix: str = "flow:") -> None:
        if (url is None) == (unix_socket_path is None):
            raise FlowError("RedisStore: give a url (redis://host:port/db) or a unix_socket_path, not both")
        self.url = url
        self.unix_socket_path = unix_socket_path
        self.prefix = prefix
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import redis
            except ImportError:
                raise FlowError("RedisStore needs the redis client: pip install 'cascadeserve[redis]'") from None
            if self.url is not None:
                self._client = redis.Redis.from_url(self.url)
            else:
                self._client = redis.Redis(unix_socket_path=self.unix_socket_path)
        return self._client

    def get(self, key: str) -> Any:
        raw = self.client.get(self.prefix + key)
        if raw is None:
            raise KeyError(key)
        return pickle.loads(raw)

    def put(self, key: str, value: Any) -> None:
        self.client.set(self.prefix + key, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def delete(self, key: str) -> None:
        self.client.delete(self.prefix + key)

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "unix_socket_path": self.unix_socket_path, "prefix": self.prefix}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], unix_socket_path=state["unix_socket_path"], prefix=state["prefix"])  # type: ignore[misc]


def size_of(value: Any) -> int:
    """Bytes a cached value holds, roughly (exact for numpy arrays and bytes)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    return sys.getsizeof(value)


class WorkerCache:
    """A worker's LRU cache in front of a store; ``hits``/``misses`` count lookups."""

    def __init__(self, store: KVStore | None, capacity_bytes: int = 1 << 30) -> None:
        self.store = store
        self.capacity_bytes = capacity_bytes
        self._items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return item[0]
            self.misses += 1
        if self.store is None:
            raise KeyError(key)
        value = self.store.get(key)
        size = size_of(value)
        with self._lock:
            if key not in self._items and size <= self.capacity_bytes:
                self._items[key] = (value, size)
                self._bytes += size
                while self._bytes > self.capacity_bytes:
                    _, (_, s) = self._items.popitem(last=False)
                    self._bytes -= s
        return value

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)
