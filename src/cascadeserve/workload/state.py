"""The workload's state folder (``.cascadeserve/`` beside the workload file) and what keeps it up to date.

``up`` writes the profile that plans and servers use to ``profile/``, the plan to ``plan.json`` and, for an inline
models config, ``models.yaml``. With calibration on (``profile.calibrate_s`` > 0, the default) ``profile measure``
writes to ``profile-measured/`` and ``profile calibrate`` scales that to ``profile/``. ``state.json`` records, per
step, a hash of the step's inputs and one of its output:

* profile: the models config (less its ``labels``, the class names), the files its references name (size and
  modification time), the source files of the modules its ``module:function`` references name, the files its
  ``kwargs`` name and those its functions declare with :func:`cascadeserve.models.base.reads`, the validation data
  (content, or the built-in set's name) and the profile options (less ``calibrate_s``). It also records that split
  (:meth:`StateDir.profile_keys`): one key per model (its config entry and what it reads) and one for the rest, so
  that a stale profile measures again only the models whose own key changed (:meth:`StateDir.stale_models`), and
  every model when the rest did;
* calibration: the measured profile's output hash, ``calibrate_s`` and the device count;
* plan: the profile's output hash, the SLO, the devices, the load (``max_qps``, ``trace``) and the plan options.

A step is up to date when both hashes match: changed inputs make it stale, and so does an output that something
else rewrote (``plan --workload`` writes the same ``plan.json``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cascadeserve.errors import CascadeServeError
from cascadeserve.workload.loader import LoadedWorkload

__all__ = ["StateDir", "file_digest", "tree_stamp"]

_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    """sha256 of a file's content."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_stamp(path: Path) -> list[Any]:
    """Size and modification time of a file, or of every file under a folder (a cheap change detector)."""
    if path.is_file():
        st = path.stat()
        return [path.name, st.st_size, st.st_mtime_ns]
    if path.is_dir():
        return [tree_stamp(p) for p in sorted(path.rglob("*")) if p.is_file()]
    return [str(path), None]


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _module_stamp(ref: str) -> list[Any]:
    """The source file of ``module`` in a ``module:function`` reference (not imported when it is top level)."""
    module = ref.split(":", 1)[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    origin = None if spec is None else spec.origin
    return [ref, tree_stamp(Path(origin)) if origin and Path(origin).is_file() else None]


@dataclass(frozen=True)
class StateDir:
    """Where ``up`` keeps a workload's profile, plan and hashes."""

    workload: LoadedWorkload
    root: Path

    @classmethod
    def of(cls, workload: LoadedWorkload, state_dir: Path | None = None) -> StateDir:
        return cls(workload, (state_dir or workload.base_dir / ".cascadeserve").resolve())

    @property
    def profile(self) -> Path:
        """The profile plans and servers use: calibrated to this host unless ``profile.calibrate_s`` is 0."""
        return self.root / "profile"

    @property
    def calibrating(self) -> bool:
        return self.workload.spec.profile.calibrate_s > 0

    @property
    def measured(self) -> Path:
        """Where ``profile measure`` writes: the quiet profile that calibration scales (``profile`` without it)."""
        return self.root / "profile-measured" if self.calibrating else self.profile

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def models_config(self) -> Path:
        """The models config file: the one the workload names, or its inline config written to ``models.yaml``
        here with relative file references made absolute (so they still resolve against the workload's folder)."""
        models = self.workload.spec.models
        if isinstance(models, str):
            return self.workload.resolve(models)
        raw = dict(self.workload.raw["models"])
        raw["models"] = [self._absolute_ref(m) for m in raw.get("models", [])]
        text = yaml.safe_dump(raw, sort_keys=False)
        out = self.root / "models.yaml"
        if not out.is_file() or out.read_text(encoding="utf-8") != text:  # same text: keep the mtime
            self._mkdir()
            out.write_text(text, encoding="utf-8")
        return out

    def _absolute_ref(self, model: Any) -> Any:
        if not isinstance(model, dict) or not isinstance(model.get("ref"), str) or _REF.match(model["ref"]):
            return model
        return {**model, "ref": str(self.workload.resolve(model["ref"]))}

    def _mkdir(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CascadeServeError(f"--state-dir: cannot create {self.root} ({e.strerror or e})") from None

    # hashes -------------------------------------------------------------------------------------------------

    def _profile_parts(self) -> tuple[Any, list[tuple[Any, list[Any]]], dict[str, Any]]:
        """The profile's inputs: the models config (less ``labels``), each model entry with the stamps of what it
        reads, and what every model's measurement depends on (the validation data, the options, the name)."""
        from cascadeserve.models.config import read_models_yaml

        cfg_path = self.models_config()
        raw = read_models_yaml(cfg_path)
        entries: list[tuple[Any, list[Any]]] = []
        for m in raw.get("models", []) if isinstance(raw, dict) and isinstance(raw.get("models"), list) else []:
            stamps = [_module_stamp(r) if _REF.match(r) else tree_stamp(cfg_path.parent / r) for r in _refs(m)]
            entries.append((m, [*stamps, *_file_inputs(m, cfg_path.parent)]))
        validation = self.workload.validation()
        data = file_digest(Path(validation)) if Path(validation).is_file() else validation
        spec = self.workload.spec
        if isinstance(raw, dict) and "labels" in raw:  # class names change the answers, not what is measured
            raw = {k: v for k, v in raw.items() if k != "labels"}
        options = spec.profile.model_dump(exclude={"calibrate_s"})  # calibration's own step: nothing re-measured
        return raw, entries, {"validation": data, "options": options, "name": spec.name}

    def profile_inputs(self) -> str:
        raw, entries, shared = self._profile_parts()
        return _hash({"models": raw, "refs": [s for _, stamps in entries for s in stamps], **shared})

    def profile_keys(self) -> tuple[str, dict[str, str]]:
        """The profile's inputs split in two: a key for what every model's measurement depends on (the models config
        less its model list, the validation data, the options) and one per model (its entry in the config, the files
        and module sources it reads)."""
        raw, entries, shared = self._profile_parts()
        rest = {k: v for k, v in raw.items() if k != "models"} if isinstance(raw, dict) else raw
        per_model = {
            str(m.get("name")): _hash({"entry": m, "reads": stamps}) for m, stamps in entries if isinstance(m, dict)
        }
        return _hash({"config": rest, **shared}), per_model

    def stale_models(self) -> list[str] | None:
        """The models to measure again, those whose own inputs changed since the profile was recorded (the others
        keep their measurement); ``None`` when every model must be measured again: nothing recorded per model, the
        shared inputs (validation data, options, the config's other keys) changed, or the measured profile was
        rewritten by something else."""
        rec = self._read().get("profile")
        if not isinstance(rec, dict) or not isinstance(rec.get("models"), dict):
            return None
        output = self.measured_output()
        if output is None or rec.get("output") != output:
            return None
        shared, per_model = self.profile_keys()
        if rec.get("shared") != shared:
            return None
        return [name for name, key in per_model.items() if rec["models"].get(name) != key]

    def measured_output(self) -> str | None:
        return _dir_hash(self.measured)

    def profile_output(self) -> str | None:
        return _dir_hash(self.profile)

    def calibration_inputs(self) -> str:
        spec = self.workload.spec
        return _hash(
            {"measured": self.measured_output(), "seconds": spec.profile.calibrate_s, "devices": spec.devices.count}
        )

    def plan_inputs(self) -> str:
        spec = self.workload.spec
        return _hash(
            {
                "profile": self.profile_output(),
                "slo": spec.slo.model_dump(),
                "devices": spec.devices.model_dump(),
                "max_qps": spec.max_qps,
                "trace": self.workload.trace(),
                "trace_stamp": tree_stamp(Path(t)) if (t := self.workload.trace()) and Path(t).exists() else None,
                "options": spec.plan.model_dump(),
            }
        )

    def plan_output(self) -> str | None:
        return file_digest(self.plan) if self.plan.is_file() else None

    # the record ----------------------------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def _hashes(self, step: str) -> tuple[str, str | None]:
        """``step``'s (inputs, output) hashes."""
        if step == "profile":
            return self.profile_inputs(), self.measured_output()
        if step == "calibration":
            return self.calibration_inputs(), self.profile_output()
        if step == "plan":
            return self.plan_inputs(), self.plan_output()
        raise ValueError(f"unknown step {step!r}")

    def up_to_date(self, step: str) -> bool:
        """Whether ``step`` (``profile``, ``calibration`` or ``plan``) has a recorded run whose inputs and output are
        unchanged."""
        rec = self._read().get(step)
        if not isinstance(rec, dict):
            return False
        inputs, output = self._hashes(step)
        return output is not None and rec.get("inputs") == inputs and rec.get("output") == output

    def record(self, step: str) -> None:
        """Record that ``step`` was just made from the current inputs."""
        inputs, output = self._hashes(step)
        doc = self._read()
        doc[step] = {"inputs": inputs, "output": output}
        if step == "profile":  # and per model: a change to one model measures only that one again
            shared, per_model = self.profile_keys()
            doc[step].update(shared=shared, models=per_model)
        self._mkdir()
        self.state_file.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def _dir_hash(path: Path) -> str | None:
    """A profile folder's stamp, or ``None`` where it holds no profile."""
    return _hash(tree_stamp(path)) if (path / "profile.yaml").is_file() else None


def _refs(model: Any) -> list[str]:
    """Every reference a model entry of a models config names: ``ref``, ``preprocess.function``, ``postprocess``."""
    if not isinstance(model, dict):
        return []
    out = [model.get("ref"), model.get("postprocess")]
    pre = model.get("preprocess")
    if isinstance(pre, dict):
        out.append(pre.get("function"))
    return [r for r in out if isinstance(r, str)]


def _file_inputs(model: Any, base: Path) -> list[Any]:
    """Stamps of the files a model entry's factory reads beyond its ``ref``: every ``kwargs`` value that names an
    existing file or folder (absolute, or relative to the models config), and what the factory declares with
    :func:`cascadeserve.models.base.reads` (a file it finds at load time, in a cache folder say)."""
    if not isinstance(model, dict):
        return []
    kwargs: dict[str, Any] = model["kwargs"] if isinstance(model.get("kwargs"), dict) else {}
    out: list[Any] = []
    for value in kwargs.values():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v and "\n" not in v and len(v) < 4096:
                p = Path(v).expanduser()
                p = p if p.is_absolute() else base / p
                if p.exists():
                    out.append([v, tree_stamp(p)])
    for ref in _refs(model):
        if not _REF.match(ref):
            continue
        module, _, name = ref.partition(":")
        args = kwargs if ref == model.get("ref") else {}  # a hook (preprocess, postprocess) takes no kwargs
        try:  # the function's own declaration: importing the module runs the user's code, as serving it will
            declared = getattr(getattr(importlib.import_module(module), name, None), "reads", None)
            files = list(declared(**args)) if callable(declared) else []
        except Exception:
            files = []
        out.extend([str(f), tree_stamp(Path(f))] for f in files)
    return out
