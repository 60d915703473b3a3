"""What a workload names must exist before work starts: each missing file, and a GPU device kind on a host without
one, is one line naming the file, the line and the field (exit code 2 from ``workload check`` and ``up``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadeserve.cli import run
from cascadeserve.errors import CascadeServeError
from cascadeserve.workload import load_workload
from cascadeserve.workload.paths import check_workload_paths, host_has_gpu

WORKLOAD = """\
name: mine
models: conf/models.yaml
validation: data/val.csv
devices: {count: 2, memory_mb: 512, kind: KIND}
slo: {p95_ms: 80}
trace: traces/load.txt
pythonpath: [code]
"""


def _project(tmp_path: Path, kind: str = "cpu", skip: str = "") -> Path:
    for rel in ("conf/models.yaml", "data/val.csv", "traces/load.txt"):
        if rel != skip:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text("x\n")
    if skip != "code":
        (tmp_path / "code").mkdir(exist_ok=True)
    path = tmp_path / "cascadeserve.yaml"
    path.write_text(WORKLOAD.replace("KIND", kind))
    return path


def test_a_workload_whose_files_exist_passes(tmp_path: Path) -> None:
    check_workload_paths(load_workload(_project(tmp_path)))


@pytest.mark.parametrize(
    ("skip", "line", "field"),
    [("data/val.csv", 3, "validation"), ("conf/models.yaml", 2, "models"), ("traces/load.txt", 6, "trace"),
     ("code", 7, "pythonpath")],
)  # fmt: skip
def test_each_missing_file_names_file_line_and_field(tmp_path: Path, skip: str, line: int, field: str) -> None:
    path = _project(tmp_path, skip=skip)
    with pytest.raises(CascadeServeError) as e:
        check_workload_paths(load_workload(path))
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}: {field}: no ") and repr(Path(skip).as_posix()) in msg


def test_workload_check_refuses_a_missing_validation_file_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _project(tmp_path, skip="data/val.csv")
    assert run(["workload", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "validation: no file 'data/val.csv'" in err and ": ok" not in err


def test_a_built_in_validation_set_needs_no_file(tmp_path: Path) -> None:
    path = _project(tmp_path)
    path.write_text(path.read_text().replace("data/val.csv", "digits"))
    check_workload_paths(load_workload(path))


@pytest.mark.skipif(host_has_gpu(), reason="this host has a GPU: a GPU kind is right here")
def test_a_gpu_kind_on_a_host_without_one_is_refused_unless_planning_for_elsewhere(tmp_path: Path) -> None:
    path = _project(tmp_path, kind="gpu")
    with pytest.raises(CascadeServeError, match=r":4: devices\.kind: 'gpu' needs a GPU and this host has none"):
        check_workload_paths(load_workload(path))
    check_workload_paths(load_workload(path), serving_here=False)
