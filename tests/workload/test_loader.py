"""Reading workload files: the example loads, relative paths resolve against the file, and every malformed file is
one line naming the file, the line and the field, with exit code 2 from the CLI. The published JSON schema is the
committed copy under docs/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascadeserve.cli import run
from cascadeserve.errors import CascadeServeError
from cascadeserve.workload import load_workload, workload_json_schema
from cascadeserve.workload.example import EXAMPLE

DOCS = Path(__file__).resolve().parents[2] / "docs"

GOOD = """\
name: mine
models: conf/models.yaml
validation: data/val.csv
devices: {count: 2, memory_mb: 512}
slo: {p95_ms: 80}
trace: traces/load.txt
pythonpath: [code]
serve: {port: 9000, batching: aimd, tune: {budget: 0.02}, auth_token_env: MY_TOKEN}
"""


def test_the_example_that_init_writes_loads(tmp_path: Path) -> None:
    (tmp_path / "cascadeserve.yaml").write_text(EXAMPLE)
    w = load_workload(tmp_path)  # a folder means its cascadeserve.yaml
    assert w.spec.name == "digits" and w.spec.slo.p95_ms == 100 and w.spec.max_qps == 100
    assert not isinstance(w.spec.models, str) and w.spec.models.models[0].name == "logreg"
    assert w.validation() == "digits"  # a built-in set stays a name


def test_relative_paths_resolve_against_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "proj"
    d.mkdir()
    (d / "w.yaml").write_text(GOOD)
    monkeypatch.chdir(tmp_path)  # somewhere else
    w = load_workload(Path("proj/w.yaml"))
    assert w.resolve(str(w.spec.models)) == d / "conf" / "models.yaml"
    assert w.validation() == str(d / "data" / "val.csv")
    assert w.trace() == str(d / "traces" / "load.txt")
    assert str(w.spec.slo) == "p95 ≤ 80 ms" and w.spec.serve.auth_token_env == "MY_TOKEN"


def _bad(body: str, line: int, field: str) -> tuple[str, int, str]:
    return body, line, field


BASE = "name: x\nmodels: m.yaml\nvalidation: v.csv\ndevices: {count: 1, memory_mb: 100}\n"


@pytest.mark.parametrize(
    ("body", "line", "says"),
    [
        _bad(BASE + "max_qps: 10\n", 1, "slo: Field required"),
        _bad(BASE + "slo:\n  p95_ms: 10\n  accuracy: 0.9\nmax_qps: 10\n", 5,
             "slo: give exactly one of p95_ms and accuracy"),
        _bad(BASE + "slo: {p95_ms: 10}\n", 1, "give max_qps or trace"),
        _bad(BASE.replace("memory_mb: 100", "memory_mb: -1") + "slo: {p95_ms: 10}\nmax_qps: 10\n", 4,
             "devices.memory_mb: Input should be greater than 0"),
        _bad(BASE + "slo: {p95_ms: 10}\nmax_qps: 10\nsloo: 3\n", 7, "sloo: Extra inputs are not permitted"),
        _bad(BASE + "slo: {p95_ms: 10}\nmax_qps: 10\nserve:\n  host: 127.0.0.1\n  auth_token_env: secret-value\n", 9,
             "serve.auth_token_env: 'secret-value' is not an environment variable name"),
        _bad(BASE.replace("models: m.yaml", "models:\n  models:\n    - name: a\n      adapter: bogus\n      ref: a.pkl")
             + "slo: {p95_ms: 10}\nmax_qps: 10\n", 5, "models.models[0].adapter: Input should be"),
        _bad(BASE.replace("models: m.yaml", "models:\n  labels: [x, y, x]\n  models: [{name: a, adapter: hf, ref: r}]")
             + "slo: {p95_ms: 10}\nmax_qps: 10\n", 3, "models.labels: duplicate class names: x"),
        _bad(BASE + "slo: {p95_ms: 10\nmax_qps: 10\n", 6, "invalid YAML"),
    ],
)  # fmt: skip
def test_a_malformed_file_is_one_line_naming_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, line: int, says: str
) -> None:
    path = tmp_path / "cascadeserve.yaml"
    path.write_text(body)
    with pytest.raises(CascadeServeError) as e:
        load_workload(path)
    assert str(e.value).startswith(f"{path}:{line}: ") and says in str(e.value)
    assert run(["workload", "check", str(path)]) == 2
    assert run(["up", str(path), "--no-serve"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(f"{path}:{line}: " in e and says in " ".join(err) for e in err)


def test_a_missing_file_says_how_to_make_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["up", str(tmp_path)]) == 2
    assert "no workload file here (cascadeserve init writes an example)" in capsys.readouterr().err


def test_the_published_schema_is_the_committed_copy(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["workload", "schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == workload_json_schema() == json.loads((DOCS / "workload.schema.json").read_text())
    assert set(printed["required"]) == {"name", "models", "validation", "devices", "slo"}
