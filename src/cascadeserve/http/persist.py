"""What a server keeps across a restart, in its state folder (``serve --state-dir``; ``--no-restore`` starts fresh).

* ``plans/<name>.json``: each cascade's plan as last served. A hot swap (``PUT /v2/cascade/plan``) or a re-plan
  (``--replan auto``) records the plan it put in force, and online tuning (``--tune``) the thresholds it last set,
  beside the plan file the cascade started from (its path and sha256). On start the plan is restored only onto a
  start from that same file, unchanged: a new ``--plan`` (or an edited one) wins, and its own changes replace the
  record from then on.
* ``repository.json``: the cascades loaded through the repository API, by name and load parameters; on start each
  is loaded again from the model repository (``serve --model-repository``), with its recorded plan. An unload
  forgets the cascade and its plan, and so does a new load of the name: a load reads the repository's files.

Every file is written whole to a temporary file in its folder, flushed to disk and renamed over the old one, so a
crash leaves the old record or the new, never half of one. Writes run on a thread of their own (the latest record of
each file wins), so the event loop never waits on the disk; :meth:`ServerState.flush` waits for them (the server's
shutdown does). A folder that cannot be written costs a warning, never the serving.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from cascadeserve.plan import GearPlan
from cascadeserve.runtime.observer import NullObserver

if TYPE_CHECKING:
    from cascadeserve.runtime import Runtime

__all__ = ["PlanWatcher", "SavedPlan", "ServerState", "plan_base", "write_atomic"]

VERSION = 1
_log = logging.getLogger("cascadeserve.state")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a temporary file beside it, flushed, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a power loss once its folder is on disk
        dirfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)


def plan_base(path: str | Path) -> dict[str, str]:
    """What a recorded plan is restored onto: the start-up plan file's resolved path and the sha256 of its bytes."""
    p = Path(path).resolve()
    return {"path": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}


@dataclass(frozen=True)
class SavedPlan:
    """A cascade's recorded plan: the plan in force (as the runtime serves it) and the thresholds tuning set."""

    plan: GearPlan
    thresholds: tuple[tuple[float, ...], ...] | None
    generation: int
    saved_at: str

    def served(self) -> GearPlan:
        """The plan with the tuned thresholds in its gears (what was answering before the restart)."""
        if self.thresholds is None or len(self.thresholds) != len(self.plan.gears):
            return self.plan
        gears = [g.model_copy(update={"thresholds": t}) for g, t in zip(self.plan.gears, self.thresholds, strict=True)]
        return GearPlan.model_validate_json(self.plan.model_copy(update={"gears": tuple(gears)}).to_json())

    def describe(self) -> str:
        planned = [tuple(g.thresholds) for g in self.plan.gears]
        changed = self.thresholds is not None and planned != list(self.thresholds)
        tuned = ", with the thresholds tuning set" if changed else ""
        return f"generation {self.generation}{tuned}, saved {self.saved_at}"


class _Writer:
    """One thread that writes (or, given ``None``, deletes) each file's latest text; idle, it ends."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._pending: dict[Path, str | None] = {}
        self._writing: tuple[Path, str | None] | None = None  # taken from _pending, not yet on disk
        self._cv = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._warned: set[Path] = set()
        self._warn = warn

    def put(self, path: Path, text: str | None) -> None:
        with self._cv:
            self._pending[path] = text
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cascadeserve-state", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def pending(self, path: Path) -> tuple[bool, str | None]:
        with self._cv:
            if path in self._pending:
                return (True, self._pending[path])
            if self._writing is not None and self._writing[0] == path:
                return (True, self._writing[1])
            return (False, None)

    def flush(self, timeout_s: float) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending and not self._busy, timeout_s)

    def _run(self) -> None:
        while True:
            with self._cv:
                if not self._pending and not self._cv.wait_for(lambda: bool(self._pending), 5.0):
                    self._thread = None
                    return
                path, text = next(iter(self._pending.items()))
                del self._pending[path]
                self._writing = (path, text)
                self._busy = True
            try:
                if text is None:
                    path.unlink(missing_ok=True)
                else:
                    write_atomic(path, text)
            except OSError as e:
                if path not in self._warned:
                    self._warned.add(path)
                    self._warn(f"warning: cannot write {path} ({e.strerror or e}): it will not survive a restart")
            finally:
                with self._cv:
                    self._busy = False
                    self._writing = None
                    self._cv.notify_all()


@dataclass
class ServerState:
    """A server's state folder (module docstring). ``restore=False``: nothing recorded is read back (what changes
    is still recorded, replacing it). ``log`` prints what was restored and what was not."""

    root: Path
    restore: bool = True
    log: Callable[[str], None] = _log.warning
    _writer: _Writer = field(init=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self._writer = _Writer(self.log)

    # -- plans ------------------------------------------------------------------------------------------------
    def plan_file(self, name: str) -> Path:
        return self.root / "plans" / f"{quote(name, safe='')}.json"

    def saved_plan(self, name: str, base: Mapping[str, str]) -> SavedPlan | None:
        """The plan recorded for cascade ``name`` when it was started from ``base`` (:func:`plan_base`); ``None``
        (and a line saying why, where one was recorded) otherwise."""
        if not self.restore:
            return None
        doc = self._read(self.plan_file(name))
        if doc is None:
            return None
        if doc.get("base") != dict(base):
            self.log(
                f"not restored: the plan recorded for {name!r} in {self.plan_file(name)} was served from another "
                "plan file, or before it changed; serving the plan file as it is"
            )
            return None
        try:
            plan = GearPlan.model_validate(doc["plan"])
            raw = doc.get("thresholds")
            thresholds = None if raw is None else tuple(tuple(float(x) for x in t) for t in raw)
            return SavedPlan(plan, thresholds, int(doc.get("generation", 0)), str(doc.get("saved_at", "?")))
        except (KeyError, TypeError, ValueError) as e:
            self.log(f"not restored: {self.plan_file(name)} is not a plan record ({type(e).__name__})")
            return None

    def restored(
        self, name: str, base: Mapping[str, str], plan: GearPlan, models: Collection[str]
    ) -> tuple[GearPlan, SavedPlan | None]:
        """The plan cascade ``name`` serves on start: the one recorded when it was served from the same plan file
        (``base``), with the thresholds tuning set, where its models are all in ``models``; else ``plan``. A line says
        which."""
        saved = self.saved_plan(name, base)
        if saved is None:
            return plan, None
        missing = sorted({r.model for r in saved.plan.replicas} - set(models))
        if missing:
            self.log(f"not restored: the plan recorded for {name!r} names models not served ({', '.join(missing)})")
            return plan, None
        self.log(f"restored the plan of {name!r} from {self.plan_file(name)} ({saved.describe()})")
        return saved.served(), saved

    def save_plan(self, name: str, base: Mapping[str, str], runtime: Runtime) -> None:
        """Record the plan ``runtime`` serves now (and its tuned thresholds) for cascade ``name``."""
        gen = runtime.current
        plan = gen.plan
        thresholds = [list(gen.tables.thresholds_of(g)) for g in range(len(plan.gears))]  # tuning's, if it ran
        doc = {
            "version": VERSION,
            "cascade": name,
            "base": dict(base),
            "generation": gen.number,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "plan": json.loads(plan.to_json(indent=None)),
            "thresholds": thresholds,
        }
        self._writer.put(self.plan_file(name), json.dumps(doc, indent=1) + "\n")

    def forget(self, name: str) -> None:
        """Drop cascade ``name``'s recorded plan (it was unloaded, or is loaded afresh from its files)."""
        self._writer.put(self.plan_file(name), None)

    def watch(self, name: str, base: Mapping[str, str]) -> PlanWatcher:
        """An observer that records cascade ``name``'s plan at every swap and threshold change (give it to
        ``build_app(observer=...)``, then set its ``runtime``)."""
        return PlanWatcher(self, name, dict(base))

    # -- the repository's loaded cascades ---------------------------------------------------------------------
    @property
    def repository_file(self) -> Path:
        return self.root / "repository.json"

    def loaded(self) -> list[tuple[str, dict[str, Any]]]:
        """The cascades recorded as loaded through the repository API (none when not restoring)."""
        if not self.restore:
            return []
        doc = self._read(self.repository_file) or {}
        out = []
        for row in doc.get("loaded", []) if isinstance(doc.get("loaded"), list) else []:
            if isinstance(row, dict) and isinstance(row.get("name"), str) and isinstance(row.get("parameters"), dict):
                out.append((row["name"], row["parameters"]))
        return out

    def save_loaded(self, entries: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        doc = {"version": VERSION, "loaded": [{"name": n, "parameters": dict(p)} for n, p in entries]}
        self._writer.put(self.repository_file, json.dumps(doc, indent=1) + "\n")

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every record handed over is on disk (``False``: still writing after ``timeout_s``)."""
        return self._writer.flush(timeout_s)

    def _read(self, path: Path) -> dict[str, Any] | None:
        queued, text = self._writer.pending(path)  # a record not yet written is the one in force
        if queued and text is None:
            return None
        try:
            doc = json.loads(text if text is not None else path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            self.log(f"not restored: cannot read {path} ({type(e).__name__})")
            return None
        return doc if isinstance(doc, dict) and doc.get("version") == VERSION else None


@dataclass
class PlanWatcher(NullObserver):
    """Records a cascade's plan whenever its runtime swaps plans or re-tunes thresholds (:meth:`ServerState.watch`)."""

    state: ServerState
    name: str
    base: dict[str, str]
    runtime: Runtime | None = None

    def _save(self) -> None:
        if self.runtime is not None:
            self.state.save_plan(self.name, self.base, self.runtime)

    def plan_swapped(self, generation: int) -> None:
        self._save()

    def thresholds_changed(self, decision: Any, generation: int) -> None:
        self._save()
