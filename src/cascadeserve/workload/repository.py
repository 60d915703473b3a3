"""A model repository (``serve --model-repository DIR``) with Triton's semantics: one folder per cascade inside
``DIR``, named by its folder; ``POST /v2/repository/models/NAME/load`` loads the folder ``DIR/NAME``, and nothing
outside ``DIR`` is read.

A folder holds either

* a workload file, ``cascadeserve.yaml``, that ``cascadeserve up`` has profiled and planned: its plan and profile
  are the ones in its state folder (``.cascadeserve/plan.json``, ``.cascadeserve/profile/``), its models config the
  file it names (or its inline config);
* or ``plan.json``, ``profile/`` (a profile folder) and ``models.yaml`` (a models config; not needed to load with
  ``emulate``, which answers from the profile's records and runs no model code).

A load's parameters are Triton's: tritonclient's ``load_model(name, config=JSON)`` sends ``{"parameters":
{"config": JSON}}``. The one setting a load takes is ``emulate`` (``true``/``false``); a path (``plan``,
``profile``, ``models``, ``workload``) or one of Triton's file overrides (``file:...``) is refused: a load names a
folder, and the folder holds the files.

**Every path stays inside.** The folder, the workload file and every path it names (``models``, ``validation``,
``trace``, ``pythonpath``), the plan, every file under the profile folder, the models config and each path in it (a
model's ``ref`` when it is a file, and its ``tokenizer``, ``calibration`` and ``cache`` options) are resolved with
symlinks followed and must lie inside ``DIR``; a path that leads out (``..``, an absolute path elsewhere, a symlink
to ``/proc`` or ``/etc``) refuses the load before anything is read, and the error names the file and the field,
never the path's target or any file's text. Errors name files relative to ``DIR``.

**What it cannot confine: code.** A models config runs code: a ``module:function`` reference (``ref``,
``preprocess.function``, ``postprocess``, ``tokens``) is imported and called, a model file (sklearn, torch) is
unpickled, an ``upstream`` model is sent requests, and a workload's ``pythonpath`` goes first on the import path.
Whoever may write the repository may run code as the server.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cascadeserve.errors import CascadeServeError
from cascadeserve.http.repository import Builder, LoadError
from cascadeserve.workload.loader import DEFAULT_FILE, LoadedWorkload, load_workload

if TYPE_CHECKING:
    from cascadeserve.http.persist import ServerState
    from cascadeserve.http.server import App
    from cascadeserve.policy.costs import CostSettings
    from cascadeserve.runtime import Backend, RuntimeOptions

__all__ = ["CascadeFiles", "ModelRepository", "load_parameters", "repository_builder"]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PLAN_FILE, PROFILE_DIR, MODELS_FILE = "plan.json", "profile", "models.yaml"
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")  # module:function, imported (not a path)
_PATH_OPTIONS = ("tokenizer", "calibration", "cache")  # adapter options that name files (relative to the cwd)
_BUILT_IN = ("digits", "tweets")  # validation sets by name (workload.loader)
_SYSTEM = (Path("/proc"), Path("/sys"), Path("/dev"))


@dataclass(frozen=True)
class CascadeFiles:
    """What one repository folder serves from, every path resolved inside the repository."""

    name: str
    plan: Path
    profile: Path
    models: Path | None  # None: emulated (answers from the profile's records)
    pythonpath: tuple[Path, ...] = ()


def load_parameters(params: Mapping[str, Any]) -> bool:
    """A load's parameters (Triton's ``config`` already unpacked) as the one setting they may hold: ``emulate``.
    Raise :class:`LoadError` naming anything else."""
    for key in params:
        if key in ("plan", "profile", "models", "workload"):
            raise LoadError(
                f"parameters.{key}: a load names a folder of the model repository, not files on the server: put the "
                "cascade's files in its folder (docs/serving.md, 'A model repository')"
            )
        if key.startswith("file:"):
            raise LoadError(f"parameters.{key}: file overrides are not taken; put the file in the cascade's folder")
        if key != "emulate":
            raise LoadError(f"parameters.{key}: unknown (a load takes 'emulate' only)")
    emulate = params.get("emulate", False)
    if not isinstance(emulate, bool):
        raise LoadError("parameters.emulate: true or false")
    return emulate


class ModelRepository:
    """The folder ``root`` as a model repository (module docstring)."""

    def __init__(self, root: str | Path) -> None:
        given = Path(root).expanduser()
        self.root = given.resolve()
        self._prefixes = sorted({f"{given.absolute()}{os.sep}", f"{self.root}{os.sep}"}, key=len, reverse=True)
        if not self.root.is_dir():
            raise CascadeServeError(f"--model-repository: {root} is not a folder")
        if any(self.root == s or self.root.is_relative_to(s) for s in _SYSTEM):
            raise CascadeServeError(f"--model-repository: {root} is a system folder, not a model repository")

    def names(self) -> list[str]:
        """The folders that may hold a cascade, sorted (Triton's index lists them, loaded or not)."""
        return sorted(p.name for p in self.root.iterdir() if NAME.match(p.name) and p.is_dir())

    def shown(self, text: str) -> str:
        """``text`` with the repository's own path left out of every path in it (errors name files within)."""
        for prefix in self._prefixes:
            text = text.replace(prefix, "")
        return text

    def inside(self, path: Path, what: str) -> Path:
        """``path`` resolved (symlinks followed), or :class:`LoadError` naming ``what`` when it leads outside."""
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            raise LoadError(f"{what}: cannot be resolved (a symlink loop?)") from None
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise LoadError(
                f"{what}: leads outside the model repository (every path must stay inside it; symlinks are followed)"
            )
        return resolved

    def signature(self, name: str) -> str:
        """A fingerprint of the folder ``name``: every file's path, size and modification time (polling reloads a
        folder whose fingerprint changed). Symlinks are not followed; what they lead to is checked at load."""
        folder = self.root / name
        h = hashlib.sha256()
        for here, dirs, files in os.walk(folder):
            dirs.sort()
            for f in sorted(files):
                p = Path(here) / f
                st = p.lstat()
                h.update(f"{p.relative_to(folder)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    # -- one folder -------------------------------------------------------------------------------------------
    def files(self, name: str, *, emulate: bool) -> CascadeFiles:
        """The files the folder ``name`` serves from, each checked to lie inside the repository."""
        if not NAME.match(name):
            raise LoadError(
                f"{name!r} is not a model name (a folder directly inside the model repository: letters, digits, "
                "'_', '.', '-')"
            )
        folder = self.root / name
        if not os.path.lexists(folder):
            raise LoadError(f"no folder {name!r} in the model repository (it has {', '.join(self.names()) or 'none'})")
        if not self.inside(folder, name).is_dir():
            raise LoadError(f"{name}: not a folder")
        if os.path.lexists(folder / DEFAULT_FILE):
            return self._workload(name, folder / DEFAULT_FILE, emulate)
        plan = self.inside(folder / PLAN_FILE, f"{name}/{PLAN_FILE}")
        if not plan.is_file():
            raise LoadError(
                f"{name}: no {DEFAULT_FILE}, nor {PLAN_FILE} (a repository folder holds a workload file, or a "
                f"{PLAN_FILE}, a {PROFILE_DIR}/ folder and a {MODELS_FILE})"
            )
        profile = self._profile(folder / PROFILE_DIR, f"{name}/{PROFILE_DIR}")
        models = None
        if not emulate:
            if not os.path.lexists(folder / MODELS_FILE):
                raise LoadError(
                    f'{name}: no {MODELS_FILE}: add the models config, or load with {{"emulate": true}} to answer '
                    "from the profile's records"
                )
            models = self._models(folder / MODELS_FILE, f"{name}/{MODELS_FILE}")
        return CascadeFiles(name, plan, profile, models)

    def _workload(self, name: str, path: Path, emulate: bool) -> CascadeFiles:
        from cascadeserve.workload.state import StateDir

        what = f"{name}/{DEFAULT_FILE}"
        self.inside(path, what)
        loaded = load_workload(path)
        spec = loaded.spec
        models_path = None
        if isinstance(spec.models, str):
            models_path = loaded.base_dir / spec.models
            self.inside(loaded.resolve(spec.models), f"{what}: models")
        for field, value in self._named_paths(loaded):
            self.inside(loaded.resolve(value), f"{what}: {field}")
        pythonpath = tuple(self.inside(loaded.resolve(f), f"{what}: pythonpath") for f in spec.pythonpath)
        state = StateDir.of(loaded)
        plan = self.inside(state.plan, f"{name}/.cascadeserve/{PLAN_FILE}")
        if not plan.is_file():
            raise LoadError(f"{name}: the workload is not planned yet (run cascadeserve up on it)")
        profile = self._profile(state.profile, f"{name}/.cascadeserve/{PROFILE_DIR}")
        models = None
        if not emulate:
            if models_path is None:  # the inline config, as up writes it into the state folder
                self.inside(state.root, f"{name}/.cascadeserve")
                models_path = state.models_config()
            models = self._models(models_path, f"{what}: models")
        return CascadeFiles(name, plan, profile, models, () if emulate else pythonpath)

    @staticmethod
    def _named_paths(loaded: LoadedWorkload) -> list[tuple[str, str]]:
        """The workload's other paths: its validation data (a file, or a built-in set's folder) and trace file."""
        spec = loaded.spec
        out = []
        name, sep, rest = spec.validation.partition(":")
        if name in _BUILT_IN and not (loaded.base_dir / spec.validation).exists():
            if sep and rest:
                out.append(("validation", rest))
        else:
            out.append(("validation", spec.validation))
        if spec.trace is not None and not spec.trace.startswith("synthetic:"):
            out.append(("trace", spec.trace))
        return out

    def _profile(self, path: Path, what: str) -> Path:
        """The profile folder, and every entry under it (symlinks followed), inside the repository."""
        top = self.inside(path, what)
        if not top.is_dir():
            raise LoadError(f"{what}: not a profile folder")
        seen = {top}
        for here, dirs, files in os.walk(top, followlinks=True):
            for entry in (*dirs, *files):
                rel = os.path.relpath(os.path.join(here, entry), top)
                self.inside(Path(here) / entry, f"{what}/{rel}")
            kept = []
            for d in dirs:  # a symlinked folder is walked once
                real = (Path(here) / d).resolve()
                if real not in seen:
                    seen.add(real)
                    kept.append(d)
            dirs[:] = kept
        return top

    def _models(self, path: Path, what: str) -> Path:
        """The models config, and every path in it, inside the repository (read here; nothing is imported)."""
        from cascadeserve.models.config import ModelsConfig, load_models_file

        if not self.inside(path, what).is_file():
            raise LoadError(f"{what}: no models config file")
        cfg = load_models_file(path)
        if isinstance(cfg, ModelsConfig):
            for i, m in enumerate(cfg.models):
                if m.adapter != "upstream" and not _REF.match(m.ref):  # a file, as build_model resolves it
                    ref = Path(m.ref)
                    self.inside(ref if ref.is_absolute() else path.parent / ref, f"{what}: models[{i}].ref")
                for key in _PATH_OPTIONS:
                    value = m.options.get(key)
                    if isinstance(value, str) and not (key == "cache" and value == "default"):
                        self.inside(Path(value), f"{what}: models[{i}].options.{key}")
        return path


def repository_builder(
    repository: ModelRepository,
    *,
    runtime_options: RuntimeOptions | None = None,
    server_options: Any = None,
    backend: Backend | None = None,
    costs: CostSettings | None = None,
    state: ServerState | None = None,
) -> Builder:
    """How ``serve --model-repository`` builds the cascade a load names: from its folder's files (checked inside the
    repository first), served with these options; its latency objective and default deadline come from its own plan
    (ten SLOs, as ``serve``'s). With ``state``, its plan is recorded as it changes, and a recorded one restored
    (:mod:`cascadeserve.http.persist`). Every error names the folder's files relative to the repository."""

    def build(name: str, params: Mapping[str, Any]) -> App:
        emulate = load_parameters(params)
        try:
            files = repository.files(name, emulate=emulate)
            return _build(files, runtime_options, server_options, backend, costs, state)
        except LoadError as e:
            raise LoadError(repository.shown(str(e))) from None
        except CascadeServeError as e:
            raise LoadError(repository.shown(str(e))) from None
        except Exception as e:  # a model that fails to load: its type and message (a pydantic error: its first loc)
            raise LoadError(f"did not load: {type(e).__name__}: {repository.shown(_message(e))}") from None

    return build


def _message(e: Exception) -> str:
    from pydantic import ValidationError

    if isinstance(e, ValidationError):  # its str() quotes the input values
        first = e.errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or e.title}: {first['msg']}"
    return str(e)


def _build(
    files: CascadeFiles,
    runtime_options: RuntimeOptions | None,
    server_options: Any,
    backend: Backend | None,
    costs: CostSettings | None,
    state: ServerState | None,
) -> App:
    from cascadeserve.http.persist import plan_base
    from cascadeserve.http.server import build_app
    from cascadeserve.plan import load_plan, plan_profile
    from cascadeserve.policy import DEFAULT_SLO_MS
    from cascadeserve.profile import load_profile
    from cascadeserve.runtime import RuntimeOptions, load_model_config

    profile = load_profile(files.profile)
    plan = load_plan(files.plan, profile)
    watcher = None
    if state is not None:
        base = plan_base(files.plan)
        plan = state.restored(files.name, base, plan, profile.model_names)[0]
        watcher = state.watch(files.name, base)
    slo = plan.slo.value if plan.slo is not None and plan.slo.kind == "p95_ms" else DEFAULT_SLO_MS
    options = dataclasses.replace(
        runtime_options or RuntimeOptions(), slo_ms=slo, default_timeout_s=10 * slo / 1000.0, capacity_qps=None,
        tuning=None, slowdowns=None,
    )  # fmt: skip
    for folder in reversed(files.pythonpath):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    models = None if files.models is None else load_model_config(files.models)
    app = build_app(
        plan_profile(profile, plan), plan, models=models, emulate=files.models is None, name=files.name,
        runtime_options=options, server_options=server_options, backend=backend, costs=costs, observer=watcher,
    )  # fmt: skip
    if watcher is not None:
        watcher.runtime = app.runtime
    return app
