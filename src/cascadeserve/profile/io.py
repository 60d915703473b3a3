"""Read and write the profile interchange format (see ARCHITECTURE.md and docs/model-families.md).

::

    PROFILE_DIR/
      profile.yaml             name, task, device, source, certainty, batch_overhead_ms (optional),
                               ray_hop_ms, ray_hop_p95_ms (optional: the Ray backend's latency per process
                               hop, mean and 95th percentile),
                               front_door_ms, front_door_p95_ms (optional: a request's latency a client sees
                               beyond the server's, mean and 95th percentile),
                               calibration (optional: how runtimes were scaled to a serving host),
                               notes (optional: one line each, what measuring found doubtful, profile/noise.py),
                               models: [{name, memory_mb, runtime_ms: {batch_size: median ms of one batch},
                                         max_batch (optional: the largest batch the model's server forms),
                                         busy_factor (optional: slower while the host's other devices are busy,
                                         profile/host.py), batch_spread (optional: the σ of each batch's
                                         time beyond its rule, profile/spread.py), upstream (optional: true
                                         for a stage another server runs, which plans give a device of its
                                         own), timing (optional: {cpus, threads, load: [before, after],
                                         points: {batch_size: {runs, ci, cv, stable}}}, profile/noise.py)}]
      labels.csv               sample_id,label
      predictions/<model>.csv  sample_id,prediction,certainty   (certainty in [0, 1], higher = surer)
      llm/costs.json, llm/tokens/<model>.csv   (optional, LLM stages) the token cost model and each sample's
                               tokens (profile/llm_side.py): a model with both has token costs
                               (profile/tokens.py); saved back with the profile

Everything is validated on the way in, and every error names the file, the line and the column, so that a user
with a 10,000-row CSV can find the one bad cell. YAML positions come from the composed node tree, which keeps
source marks; CSVs are read with the standard ``csv`` module, one row at a time.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cascadeserve.errors import ProfileError, yaml_problem
from cascadeserve.profile._yaml import dump_profile_yaml, plain
from cascadeserve.profile.llm_side import read_costs, read_tokens, tokens_path, write_costs, write_tokens
from cascadeserve.profile.profile import ModelProfile, Profile
from cascadeserve.profile.runtime import RuntimeCurve
from cascadeserve.profile.spread import MAX_SPREAD
from cascadeserve.profile.timing import ModelTiming
from cascadeserve.profile.tokens import TokenCost

__all__ = ["load_profile", "record_batch_overhead", "record_costs", "save_profile"]

PROFILE_FILE = "profile.yaml"
LABELS_FILE = "labels.csv"
PREDICTIONS_DIR = "predictions"
_NULL_TAG = "tag:yaml.org,2002:null"


def _err(path: Path, node: yaml.Node | None, message: str) -> ProfileError:
    if node is None:
        return ProfileError(message, path=path)
    return ProfileError(message, path=path, line=node.start_mark.line + 1, column=node.start_mark.column + 1)


def _mapping(path: Path, node: yaml.Node, what: str) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise _err(path, node, f"{what} must be a mapping")
    out: dict[str, yaml.Node] = {}
    for k, v in node.value:
        key = str(k.value)
        if key in out:
            raise _err(path, k, f"duplicate key {key!r} in {what}")
        out[key] = v
    return out


def _number(path: Path, node: yaml.Node, what: str, *, positive: bool = False) -> float:
    if not isinstance(node, yaml.ScalarNode):
        raise _err(path, node, f"{what} must be a number")
    try:
        value = float(node.value)
    except ValueError:
        raise _err(path, node, f"{what} must be a number, got {node.value!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise _err(
            path,
            node,
            f"{what} must be a {'positive' if positive else 'non-negative'} number, got {node.value!r}",
        )
    return value


def _read_yaml(path: Path) -> tuple[dict[str, yaml.Node], list[tuple[ModelProfile, yaml.Node]]]:
    if not path.is_file():
        raise ProfileError(
            f"missing {PROFILE_FILE}; a profile directory needs {PROFILE_FILE}, {LABELS_FILE} "
            f"and {PREDICTIONS_DIR}/<model>.csv",
            path=path,
        )
    try:
        root = yaml.compose(_read_text(path))
    except yaml.YAMLError as e:  # file and line, never the line's text (it may hold a secret)
        line, column, problem = yaml_problem(e)
        raise ProfileError(f"invalid YAML: {problem}", path=path, line=line, column=column) from None
    if root is None:
        raise ProfileError("empty file", path=path)
    top = _mapping(path, root, "the profile")
    if "models" not in top:
        raise _err(path, root, "missing key 'models'")
    models_node = top["models"]
    if not isinstance(models_node, yaml.SequenceNode) or not models_node.value:
        raise _err(path, models_node, "'models' must be a non-empty list")
    models: list[tuple[ModelProfile, yaml.Node]] = []
    seen: dict[str, yaml.Node] = {}
    for item in models_node.value:
        m = _mapping(path, item, "a model entry")
        for key in ("name", "memory_mb", "runtime_ms"):
            if key not in m:
                raise _err(path, item, f"model entry is missing {key!r}")
        name_node = m["name"]
        if not isinstance(name_node, yaml.ScalarNode) or name_node.tag == _NULL_TAG or not name_node.value:
            raise _err(path, name_node, "a model name must be a non-empty string")
        name = str(name_node.value)
        if name in seen:
            first = seen[name].start_mark.line + 1
            raise _err(path, m["name"], f"duplicate model name {name!r} (first defined on line {first})")
        seen[name] = m["name"]
        if "/" in name or name.startswith("."):
            raise _err(path, m["name"], f"model name {name!r} cannot be used as a file name")
        memory = _number(path, m["memory_mb"], f"model {name!r}: memory_mb")
        rt = _mapping(path, m["runtime_ms"], f"model {name!r}: runtime_ms")
        if not rt:
            raise _err(path, m["runtime_ms"], f"model {name!r}: runtime_ms needs at least one batch size")
        curve: dict[int, float] = {}
        for b_str, v in rt.items():
            try:
                b = int(b_str)
            except ValueError:
                b = 0
            if b < 1:
                raise _err(path, v, f"model {name!r}: batch size {b_str!r} must be a positive integer")
            if b in curve:
                raise _err(path, v, f"model {name!r}: batch size {b} is given twice")
            curve[b] = _number(path, v, f"model {name!r}: runtime_ms[{b}]", positive=True)
        cap: int | None = None
        if "max_batch" in m and m["max_batch"].tag != _NULL_TAG:
            value = _number(path, m["max_batch"], f"model {name!r}: max_batch", positive=True)
            if value != int(value):
                raise _err(path, m["max_batch"], f"model {name!r}: max_batch must be a positive integer")
            cap = int(value)
        busy = 1.0
        if "busy_factor" in m and m["busy_factor"].tag != _NULL_TAG:
            busy = _number(path, m["busy_factor"], f"model {name!r}: busy_factor", positive=True)
        spread = 0.0
        if "batch_spread" in m and m["batch_spread"].tag != _NULL_TAG:
            spread = _number(path, m["batch_spread"], f"model {name!r}: batch_spread")
            if spread > MAX_SPREAD:
                raise _err(path, m["batch_spread"], f"model {name!r}: batch_spread must be at most {MAX_SPREAD:.4g}")
        remote = False
        if "upstream" in m and m["upstream"].tag != _NULL_TAG:
            node = m["upstream"]
            if not isinstance(node, yaml.ScalarNode) or node.value.lower() not in ("true", "false"):
                raise _err(path, node, f"model {name!r}: upstream must be true or false")
            remote = node.value.lower() == "true"
        timing = None
        if "timing" in m and m["timing"].tag != _NULL_TAG:
            try:
                timing = ModelTiming.from_doc(plain(m["timing"]))
            except ValueError as e:
                raise _err(path, m["timing"], f"model {name!r}: timing: {e}") from None
        curve_ = RuntimeCurve.from_mapping(curve)
        model = ModelProfile(
            name, memory, curve_, cap, busy_factor=busy, upstream=remote, batch_spread=spread, timing=timing
        )
        models.append((model, item))
    return top, models


def _notes(path: Path, top: dict[str, yaml.Node]) -> tuple[str, ...]:
    node = top.get("notes")
    if node is None or node.tag == _NULL_TAG:
        return ()
    value = plain(node)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _err(path, node, "notes must be a list of strings")
    return tuple(value)


def _read_text(path: Path) -> str:
    """The file as text: UTF-8, with or without the byte-order mark that spreadsheet exports add."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        start = e.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        line = raw.count(b"\n", 0, start) + 1
        column = start - raw.rfind(b"\n", 0, start)
        raise ProfileError(
            f"not UTF-8 text (byte {raw[start]:#04x}); save the file as UTF-8", path=path, line=line, column=column
        ) from None


def _rows(path: Path, header: tuple[str, ...]) -> list[tuple[int, list[str]]]:
    if not path.is_file():
        raise ProfileError("file is missing", path=path)
    reader = csv.reader(io.StringIO(_read_text(path), newline=""))
    first = next(reader, None)
    if first is None:
        raise ProfileError(f"empty file; expected header {','.join(header)}", path=path, line=1)
    if tuple(c.strip() for c in first) != header:
        raise ProfileError(f"header must be {','.join(header)}, got {','.join(first)}", path=path, line=1)
    rows = []
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            raise ProfileError(f"expected {len(header)} fields, got {len(row)}", path=path, line=reader.line_num)
        rows.append((reader.line_num, row))
    if not rows:
        raise ProfileError("no data rows", path=path, line=2)
    return rows


def _int_cell(path: Path, line: int, column: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ProfileError(
            f"expected an integer class index, got {value!r}", path=path, line=line, column=column
        ) from None


def _canonical_int(text: str) -> int | None:
    """``text`` as an int64 when it is one written the canonical way ("7", "-2"; not "007", "+7" or "²").

    Only then can the ids become integers without two distinct ids ("7", "007") collapsing into one.
    """
    try:
        value = int(text)
    except ValueError:
        return None
    return value if str(value) == text and -(2**63) <= value < 2**63 else None


def load_profile(directory: str | Path) -> Profile:
    """Read and validate a profile directory; raise :class:`ProfileError` naming file, line and column."""
    d = Path(directory)
    if not d.is_dir():
        raise ProfileError("profile directory does not exist", path=d)
    ypath = d / PROFILE_FILE
    top, models = _read_yaml(ypath)

    lpath = d / LABELS_FILE
    ids: list[str] = []
    labels: list[int] = []
    where: dict[str, int] = {}
    for line, (sid, label) in _rows(lpath, ("sample_id", "label")):
        sid = sid.strip()
        if sid in where:
            raise ProfileError(
                f"duplicate sample_id {sid!r} (first on line {where[sid]})",
                path=lpath,
                line=line,
                column="sample_id",
            )
        where[sid] = line
        ids.append(sid)
        labels.append(_int_cell(lpath, line, "label", label))
    pos = {sid: i for i, sid in enumerate(ids)}
    n = len(ids)

    preds = np.empty((len(models), n), dtype=np.int64)
    certs = np.empty((len(models), n), dtype=np.float64)
    for mi, (m, node) in enumerate(models):
        ppath = d / PREDICTIONS_DIR / f"{m.name}.csv"
        if not ppath.is_file():
            raise ProfileError(
                f"predictions for model {m.name!r} are missing (declared on line "
                f"{node.start_mark.line + 1} of {ypath})",
                path=ppath,
            )
        seen = np.zeros(n, dtype=bool)
        for line, (sid, pred, cert) in _rows(ppath, ("sample_id", "prediction", "certainty")):
            sid = sid.strip()
            i = pos.get(sid)
            if i is None:
                raise ProfileError(
                    f"sample_id {sid!r} is not in {LABELS_FILE}", path=ppath, line=line, column="sample_id"
                )
            if seen[i]:
                raise ProfileError(f"duplicate sample_id {sid!r}", path=ppath, line=line, column="sample_id")
            seen[i] = True
            preds[mi, i] = _int_cell(ppath, line, "prediction", pred)
            try:
                c = float(cert)
            except ValueError:
                c = math.nan
            if not (0.0 <= c <= 1.0):
                raise ProfileError(
                    f"certainty must be a number in [0, 1], got {cert!r}",
                    path=ppath,
                    line=line,
                    column="certainty",
                )
            certs[mi, i] = c
        if not seen.all():
            missing = [ids[i] for i in np.flatnonzero(~seen)[:5]]
            raise ProfileError(
                f"{int((~seen).sum())} sample(s) from {LABELS_FILE} have no prediction for model "
                f"{m.name!r}, e.g. sample_id " + ", ".join(f"{s!r} ({LABELS_FILE} line {where[s]})" for s in missing),
                path=ppath,
            )

    def meta(key: str) -> str:
        node = top.get(key)
        # a composed node keeps the raw text, so YAML's null (``~``, ``null``, empty) must be recognised by its tag
        if not isinstance(node, yaml.ScalarNode) or node.tag == _NULL_TAG:
            return ""
        return str(node.value)

    as_ints = [_canonical_int(s) for s in ids]
    sample_ids = (
        np.array(as_ints, dtype=np.int64) if all(v is not None for v in as_ints) else np.array(ids, dtype=object)
    )
    return Profile(
        name=meta("name") or d.name,
        models=_with_tokens(d, [m for m, _ in models], pos),
        sample_ids=sample_ids,
        labels=np.asarray(labels, dtype=np.int64),
        predictions=preds,
        certainties=certs,
        task=meta("task") or "classification",
        device=meta("device"),
        source=meta("source"),
        batch_overhead_ms=(
            _number(ypath, top["batch_overhead_ms"], "batch_overhead_ms") if meta("batch_overhead_ms") else 0.0
        ),
        ray_hop_ms=_number(ypath, top["ray_hop_ms"], "ray_hop_ms") if meta("ray_hop_ms") else 0.0,
        ray_hop_p95_ms=_number(ypath, top["ray_hop_p95_ms"], "ray_hop_p95_ms") if meta("ray_hop_p95_ms") else 0.0,
        front_door_ms=_number(ypath, top["front_door_ms"], "front_door_ms") if meta("front_door_ms") else 0.0,
        front_door_p95_ms=(
            _number(ypath, top["front_door_p95_ms"], "front_door_p95_ms") if meta("front_door_p95_ms") else 0.0
        ),
        calibration=meta("calibration"),
        notes=_notes(ypath, top),
    )


def _with_tokens(d: Path, models: list[ModelProfile], pos: dict[str, int]) -> tuple[ModelProfile, ...]:
    """``models`` with the token costs of those that have both a cost model and token counts in ``d/llm``."""
    costs = read_costs(d)
    out: list[ModelProfile] = []
    for m in models:
        c = costs.get(m.name)
        tok = read_tokens(d, m.name) if c is not None else None
        if c is None or tok is None:
            out.append(m)
            continue
        idx = np.full(len(pos), -1, dtype=np.int64)
        for k, sid in enumerate(tok.sample_ids):
            i = pos.get(sid)
            if i is None:
                raise ProfileError(
                    f"sample_id {sid!r} is not in {LABELS_FILE}", path=tokens_path(d, m.name), line=k + 2
                )
            idx[i] = k
        if (idx < 0).any():
            missing = [s for s, i in pos.items() if idx[i] < 0][:3]
            raise ProfileError(
                f"no token counts for sample_id {', '.join(map(repr, missing))}", path=tokens_path(d, m.name)
            )
        tc = TokenCost(c, tok.prompt_tokens[idx], tok.output_tokens[idx], tok.scored_tokens[idx])
        out.append(dataclasses.replace(m, tokens=tc))
    return tuple(out)


def _yaml_doc(profile: Profile) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": profile.name,
        "task": profile.task,
        "device": profile.device,
        "source": profile.source,
    }
    if profile.batch_overhead_ms:
        doc["batch_overhead_ms"] = float(profile.batch_overhead_ms)
    if profile.ray_hop_ms:
        doc["ray_hop_ms"] = float(profile.ray_hop_ms)
    if profile.ray_hop_p95_ms:
        doc["ray_hop_p95_ms"] = float(profile.ray_hop_p95_ms)
    if profile.front_door_ms:
        doc["front_door_ms"] = float(profile.front_door_ms)
    if profile.front_door_p95_ms:
        doc["front_door_p95_ms"] = float(profile.front_door_p95_ms)
    if profile.calibration:
        doc["calibration"] = profile.calibration
    if profile.notes:
        doc["notes"] = list(profile.notes)
    models: list[dict[str, Any]] = []
    for m in profile.models:
        entry: dict[str, Any] = {
            "name": m.name,
            "memory_mb": float(m.memory_mb),
            "runtime_ms": {int(b): float(v) for b, v in m.runtime.as_mapping().items()},
        }
        if m.max_batch is not None:
            entry["max_batch"] = int(m.max_batch)
        if m.busy_factor != 1.0:
            entry["busy_factor"] = float(m.busy_factor)
        if m.batch_spread:
            entry["batch_spread"] = float(m.batch_spread)
        if m.upstream:
            entry["upstream"] = True
        if m.timing is not None:
            entry["timing"] = m.timing.to_doc()
        models.append(entry)
    doc["models"] = models
    return doc


def save_profile(profile: Profile, directory: str | Path) -> Path:
    """Write ``profile`` in the interchange format; returns the directory. Round-trips with :func:`load_profile`."""
    d = Path(directory)
    (d / PREDICTIONS_DIR).mkdir(parents=True, exist_ok=True)
    (d / PROFILE_FILE).write_text(dump_profile_yaml(_yaml_doc(profile)), encoding="utf-8")
    ids = [str(s) for s in profile.sample_ids]
    with (d / LABELS_FILE).open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["sample_id", "label"])
        w.writerows(zip(ids, profile.labels.tolist(), strict=True))
    for mi, m in enumerate(profile.models):
        with (d / PREDICTIONS_DIR / f"{m.name}.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["sample_id", "prediction", "certainty"])
            # repr() keeps every bit of the float, so the round trip is exact.
            w.writerows(
                zip(
                    ids,
                    profile.predictions[mi].tolist(),
                    (repr(float(c)) for c in profile.certainties[mi]),
                    strict=True,
                )
            )
        if m.tokens is not None:
            t = m.tokens
            write_tokens(d, m.name, ids, t.prompt_tokens.tolist(), t.output_tokens.tolist(), t.scored_tokens.tolist())
            write_costs(d, m.name, t.costs)
    return d


def record_batch_overhead(directory: str | Path, overhead_ms: float) -> Path:
    """Set ``batch_overhead_ms`` in a profile directory's ``profile.yaml`` (the rest of the file is kept; comments
    are not). ``profile measure`` and ``serve --emulate`` record the runtime's measured per-batch cost this way."""
    return record_costs(directory, batch_overhead_ms=overhead_ms)


def record_costs(directory: str | Path, **costs_ms: float) -> Path:
    """Set the measured serving costs ``costs_ms`` (``batch_overhead_ms``, ``ray_hop_ms``, ``ray_hop_p95_ms``) in
    a profile directory's ``profile.yaml``, after the metadata (the rest of the file is kept; comments are not)."""
    for key, value in costs_ms.items():
        if key not in ("batch_overhead_ms", "ray_hop_ms", "ray_hop_p95_ms"):
            raise ValueError(f"{key} is not a serving cost a profile records")
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{key} must be a finite number ≥ 0, got {value!r}")
    path = Path(directory) / PROFILE_FILE
    doc = yaml.safe_load(_read_text(path))
    if not isinstance(doc, dict):
        raise ProfileError("the profile must be a mapping", path=path)
    new = {k: round(float(v), 6) for k, v in costs_ms.items()}
    out: dict[str, Any] = {}
    for k, v in doc.items():  # keep the key order, with the costs after the metadata
        if k == "models":
            out.update({c: x for c, x in new.items() if c not in out})
        if k not in new:
            out[k] = v
    out.update({c: x for c, x in new.items() if c not in out})
    try:
        path.write_text(dump_profile_yaml(out), encoding="utf-8")
    except OSError as e:
        raise ProfileError(f"cannot record {', '.join(new)}: {e.strerror or e}", path=path) from None
    return path
