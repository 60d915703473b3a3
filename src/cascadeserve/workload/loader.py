"""Reading a workload file: YAML with line numbers, validation, and paths resolved against the file's folder.

Every problem is one line naming the file, the line and the field (``cascadeserve.yaml:7: slo: give exactly one of
p95_ms and accuracy``), raised as :class:`~cascadeserve.errors.CascadeServeError` (exit code 2). The line comes from
PyYAML's composed node tree, which keeps each key's position, so a validation error's ``loc`` (a path of keys and
indices) is mapped back to the line of the deepest key the file has.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cascadeserve.errors import CascadeServeError, yaml_problem
from cascadeserve.workload.schema import Workload

__all__ = ["DEFAULT_FILE", "LoadedWorkload", "load_workload", "resolve_path"]

DEFAULT_FILE = "cascadeserve.yaml"
_UNION_TAGS = ("path", "inline")  # the discriminator tags pydantic puts into the loc of ``models``


@dataclass(frozen=True)
class LoadedWorkload:
    """A validated workload and where it came from (relative paths in it resolve against ``path.parent``)."""

    path: Path
    spec: Workload
    raw: dict[str, Any]  # the parsed YAML (the inline models config is written out from it)

    @classmethod
    def from_file(cls, path: str | Path) -> LoadedWorkload:
        """Read and validate the workload file at ``path`` (or the folder holding ``cascadeserve.yaml``), and put its
        ``pythonpath`` folders on the import path, where its models' module references are found."""
        workload = load_workload(path)
        workload.add_pythonpath()
        return workload

    @classmethod
    def example(cls, directory: str | Path, *, force: bool = False) -> LoadedWorkload:
        """Write the commented example workload (the digits family, trained on first use) into ``directory`` (what
        ``cascadeserve init`` does) and read it; an existing file is overwritten only with ``force``."""
        from cascadeserve.workload.example import EXAMPLE

        folder = Path(directory)
        path = folder / DEFAULT_FILE
        if path.exists() and not force:
            raise CascadeServeError(f"{path} exists; --force overwrites it")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(EXAMPLE, encoding="utf-8")
        except OSError as e:
            raise CascadeServeError(f"{path}: cannot write it ({e.strerror or e})") from None
        return cls.from_file(path)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, value: str) -> Path:
        return resolve_path(value, self.base_dir)

    def validation(self) -> str:
        """The ``validation`` value as ``load_validation`` takes it: a resolved path for a file, else the name."""
        v = self.spec.validation
        name = v.split(":", 1)[0]
        if name in ("digits", "tweets") and not (self.base_dir / v).exists():
            return v
        return str(self.resolve(v))

    def trace(self) -> str | None:
        """The ``trace`` spec, with a file path resolved (a ``synthetic:`` spec stays as written)."""
        t = self.spec.trace
        if t is None or t.startswith("synthetic:"):
            return t
        return str(self.resolve(t))

    def add_pythonpath(self) -> None:
        """Put the workload's ``pythonpath`` folders first on the import path (the models' module references)."""
        for folder in reversed(self.spec.pythonpath):
            p = str(self.resolve(folder))
            if p not in sys.path:
                sys.path.insert(0, p)


def resolve_path(value: str | Path, base: Path) -> Path:
    """``value`` as an absolute path: as given when absolute (``~`` expanded), else against ``base``."""
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base / p).resolve()


def load_workload(path: str | Path) -> LoadedWorkload:
    """Read and validate the workload file at ``path``; every problem is one line naming file, line and field."""
    p = Path(path)
    if p.is_dir():
        p = p / DEFAULT_FILE
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CascadeServeError(
            f"{p}: no workload file here (cascadeserve init writes an example)"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CascadeServeError(f"{p}: cannot read the workload file ({e})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:  # file and line, never the line's text (it may hold a secret)
        line, _, problem = yaml_problem(e)
        raise CascadeServeError(f"{p}:{line or 1}: invalid YAML: {problem}") from None
    if not isinstance(raw, dict):
        raise CascadeServeError(f"{p}:1: the workload must be a mapping (name: ..., models: ..., ...)")
    try:
        spec = Workload.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x in _UNION_TAGS))
        line = line_of(node, loc)
        field = _dotted(loc) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        raise CascadeServeError(f"{p}:{line}: {field}: {msg}{more}") from None
    return LoadedWorkload(p.resolve(), spec, raw)


def line_of(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int:
    """The 1-based line of the deepest key or item on ``loc`` that the YAML has (the key's line for a mapping)."""
    line = 1 if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    line, node = key.start_mark.line + 1, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
