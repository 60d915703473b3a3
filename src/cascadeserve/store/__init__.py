"""Where serving state that must outlive a process is kept: selection weights per application and context.

:class:`SelectionStore` is the interface (get, put, list); :class:`SqliteSelectionStore` the default, an
embedded SQLite file, so a restarted server resumes with the weights its feedback taught it. :class:`Selector`
applies the selection policy (exp3, exp4) per application and context on top of a store. A networked store
(Redis, as Clipper used) implements the same three methods.
"""

from __future__ import annotations

from cascadeserve.store.selection import MemorySelectionStore, SelectionStore, SqliteSelectionStore
from cascadeserve.store.selector import GLOBAL, Selector

__all__ = ["GLOBAL", "MemorySelectionStore", "SelectionStore", "Selector", "SqliteSelectionStore"]
