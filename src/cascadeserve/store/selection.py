"""Selection state stores: the interface and its embedded SQLite implementation.

A state is keyed by ``(application, context)``; the global state of an application has the context ``""``.
:class:`SqliteSelectionStore` writes every ``put`` in its own transaction (WAL journal), so a crash loses at
most the update in flight, and a second process can read the file. It is used from the event loop: one small
row per feedback is far below the cost of the request it follows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Protocol

from cascadeserve.policy.selection import SelectionState

__all__ = ["MemorySelectionStore", "SelectionStore", "SqliteSelectionStore"]


class SelectionStore(Protocol):
    """Keeps one :class:`SelectionState` per application and context (``""``: the global state)."""

    def get(self, app: str, context: str) -> SelectionState | None: ...

    def put(self, app: str, context: str, state: SelectionState) -> None: ...

    def contexts(self, app: str) -> list[str]: ...


class MemorySelectionStore:
    """A dict: for tests and for deployments that accept losing the weights on restart."""

    def __init__(self) -> None:
        self._data: dict[tuple[str, str], SelectionState] = {}

    def get(self, app: str, context: str) -> SelectionState | None:
        return self._data.get((app, context))

    def put(self, app: str, context: str, state: SelectionState) -> None:
        self._data[(app, context)] = state

    def contexts(self, app: str) -> list[str]:
        return sorted(c for a, c in self._data if a == app)


class SqliteSelectionStore:
    """Selection states in an SQLite file (created with its table when missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS selection (app TEXT NOT NULL, context TEXT NOT NULL, "
            "log_weights TEXT NOT NULL, updates INTEGER NOT NULL, PRIMARY KEY (app, context))"
        )

    def get(self, app: str, context: str) -> SelectionState | None:
        with self._lock:
            row = self._db.execute(
                "SELECT log_weights, updates FROM selection WHERE app = ? AND context = ?", (app, context)
            ).fetchone()
        if row is None:
            return None
        return SelectionState(tuple(float(x) for x in json.loads(row[0])), int(row[1]))

    def put(self, app: str, context: str, state: SelectionState) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO selection (app, context, log_weights, updates) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (app, context) DO UPDATE SET log_weights = excluded.log_weights, "
                "updates = excluded.updates",
                (app, context, json.dumps(list(state.log_weights)), state.updates),
            )

    def contexts(self, app: str) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT context FROM selection WHERE app = ? ORDER BY context", (app,)).fetchall()
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
