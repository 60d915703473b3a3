"""Profile import/export: an exact round trip, and every bad input named by file, line and column."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.cli import run
from cascadeserve.errors import CascadeServeError, ProfileError
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, load_profile, save_profile

# Line numbers below refer to these texts; keep them in step.
PROFILE_YAML = """\
name: tiny
task: classification
device: laptop
source: hand-made
models:
  - name: a
    memory_mb: 10
    runtime_ms:
      1: 1.0
      8: 4.0
  - name: b
    memory_mb: 20.5
    runtime_ms:
      1: 2.0
      8: 9.0
"""
LABELS = "sample_id,label\ns1,0\ns2,1\ns3,2\n"
PRED_A = "sample_id,prediction,certainty\ns1,0,0.9\ns2,0,0.25\ns3,2,1.0\n"
PRED_B = "sample_id,prediction,certainty\ns3,2,0.5\ns1,0,0.75\ns2,1,0\n"


def write_profile(
    d: Path,
    *,
    yaml_text: str | None = PROFILE_YAML,
    labels: str | None = LABELS,
    a: str | None = PRED_A,
    b: str | None = PRED_B,
) -> Path:
    (d / "predictions").mkdir(parents=True, exist_ok=True)
    for rel, text in (
        ("profile.yaml", yaml_text),
        ("labels.csv", labels),
        ("predictions/a.csv", a),
        ("predictions/b.csv", b),
    ):
        if text is not None:
            (d / rel).write_text(text, encoding="utf-8")
    return d


# -- reading a good profile -------------------------------------------------------------------------------------
def test_load_hand_made_profile(tmp_path: Path) -> None:
    prof = load_profile(write_profile(tmp_path))
    assert prof.name == "tiny"
    assert (prof.task, prof.device, prof.source) == ("classification", "laptop", "hand-made")
    assert prof.model_names == ("a", "b")
    assert prof.model("a").memory_mb == 10.0
    assert prof.model("b").memory_mb == 20.5
    assert prof.model("a").runtime.as_mapping() == {1: 1.0, 8: 4.0}
    assert prof.model("b").runtime.as_mapping() == {1: 2.0, 8: 9.0}
    assert prof.sample_ids.tolist() == ["s1", "s2", "s3"]
    np.testing.assert_array_equal(prof.labels, [0, 1, 2])
    # b.csv lists its rows in another order; records are aligned to labels.csv
    np.testing.assert_array_equal(prof.predictions, [[0, 0, 2], [0, 1, 2]])
    np.testing.assert_array_equal(prof.certainties, [[0.9, 0.25, 1.0], [0.75, 0.0, 0.5]])
    np.testing.assert_allclose(prof.accuracies, [2 / 3, 1.0])


def test_numeric_sample_ids_load_as_integers(tmp_path: Path) -> None:
    d = write_profile(
        tmp_path,
        labels="sample_id,label\n10,0\n-2,1\n",
        a="sample_id,prediction,certainty\n10,0,0.5\n-2,1,0.5\n",
        b="sample_id,prediction,certainty\n-2,1,0.5\n10,1,0.5\n",
    )
    prof = load_profile(d)
    assert prof.sample_ids.dtype == np.int64
    assert prof.sample_ids.tolist() == [10, -2]


@pytest.mark.parametrize(
    "ids",
    [
        ["007", "7"],  # distinct ids that int() would merge
        ["1", "+2"],
        ["3", "²"],  # str.isdigit() is true, int() fails
        ["1", "99999999999999999999"],  # beyond int64
        ["1", "1_000"],
    ],
)
def test_non_canonical_integer_ids_stay_strings(tmp_path: Path, ids: list[str]) -> None:
    rows = "".join(f"{s},0\n" for s in ids)
    preds = "sample_id,prediction,certainty\n" + "".join(f"{s},0,0.5\n" for s in ids)
    prof = load_profile(write_profile(tmp_path, labels="sample_id,label\n" + rows, a=preds, b=preds))
    assert prof.sample_ids.dtype == object
    assert prof.sample_ids.tolist() == ids


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    bom = "\ufeff"
    d = write_profile(tmp_path, yaml_text=bom + PROFILE_YAML, labels=bom + LABELS, a=bom + PRED_A)
    prof = load_profile(d)
    assert prof.name == "tiny"
    assert prof.sample_ids.tolist() == ["s1", "s2", "s3"]


def test_windows_line_endings_are_accepted(tmp_path: Path) -> None:
    crlf = {k: v.replace("\n", "\r\n") for k, v in {"labels": LABELS, "a": PRED_A, "b": PRED_B}.items()}
    prof = load_profile(write_profile(tmp_path, **crlf))
    np.testing.assert_array_equal(prof.certainties, [[0.9, 0.25, 1.0], [0.75, 0.0, 0.5]])


def test_missing_metadata_defaults(tmp_path: Path) -> None:
    text = PROFILE_YAML.replace("name: tiny\ntask: classification\ndevice: laptop\nsource: hand-made\n", "")
    d = write_profile(tmp_path / "dirname", yaml_text=text)
    prof = load_profile(d)
    assert (prof.name, prof.task, prof.device, prof.source) == ("dirname", "classification", "", "")


@pytest.mark.parametrize("null", ["~", "null", "Null", ""])
def test_yaml_null_metadata_reads_as_empty(tmp_path: Path, null: str) -> None:
    text = PROFILE_YAML.replace("device: laptop", f"device: {null}").replace("name: tiny", f"name: {null}")
    prof = load_profile(write_profile(tmp_path / "dir", yaml_text=text))
    assert (prof.name, prof.device) == ("dir", "")


def test_quoted_null_metadata_is_kept_as_text(tmp_path: Path) -> None:
    text = PROFILE_YAML.replace("device: laptop", "device: 'null'")
    assert load_profile(write_profile(tmp_path, yaml_text=text)).device == "null"


# -- round trip -------------------------------------------------------------------------------------------------
def assert_same_profile(a: Profile, b: Profile) -> None:
    assert b.name == a.name
    assert (b.task, b.device, b.source) == (a.task, a.device, a.source)
    assert b.model_names == a.model_names
    for ma, mb in zip(a.models, b.models, strict=True):
        assert mb.memory_mb == ma.memory_mb
        assert mb.runtime == ma.runtime
    assert b.sample_ids.tolist() == a.sample_ids.tolist()
    np.testing.assert_array_equal(b.labels, a.labels)
    np.testing.assert_array_equal(b.predictions, a.predictions)
    assert b.certainties.dtype == np.float64
    # bit-exact, not merely close
    np.testing.assert_array_equal(b.certainties.view(np.uint64), a.certainties.view(np.uint64))


def test_round_trip_of_the_toy_profile_is_exact(tmp_path: Path, toy_profile: Profile) -> None:
    prof = toy_profile
    out = save_profile(prof, tmp_path / "p")
    assert out == tmp_path / "p"
    assert sorted(p.name for p in (out / "predictions").iterdir()) == ["m0.csv", "m1.csv", "m2.csv"]
    assert_same_profile(prof, load_profile(out))


def test_round_trip_of_a_loaded_profile_is_exact(tmp_path: Path) -> None:
    prof = load_profile(write_profile(tmp_path / "in"))
    again = load_profile(save_profile(prof, tmp_path / "out"))
    assert_same_profile(prof, again)
    assert again.sample_ids.tolist() == ["s1", "s2", "s3"]


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    n_models = draw(st.integers(1, 3))
    n = draw(st.integers(1, 12))
    models = []
    for i in range(n_models):
        sizes = sorted(draw(st.sets(st.integers(1, 128), min_size=1, max_size=3)))
        ms = draw(st.lists(st.floats(1e-3, 1e4), min_size=len(sizes), max_size=len(sizes)))
        mem = draw(st.floats(0.0, 1e6))
        models.append(ModelProfile(f"model-{i}", mem, RuntimeCurve(tuple(sizes), tuple(ms))))
    cert = st.floats(0.0, 1.0) | st.sampled_from([0.0, 1.0, 5e-324, 0.1 + 0.2, 1 - 2**-53])
    certs = np.array([[draw(cert) for _ in range(n)] for _ in range(n_models)], dtype=np.float64)
    preds = np.array(draw(st.lists(st.integers(0, 4), min_size=n * n_models, max_size=n * n_models))).reshape(
        n_models, n
    )
    labels = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=np.int64)
    ids = np.array([f"id{i}" for i in range(n)], dtype=object) if draw(st.booleans()) else np.arange(n) * 7
    name = draw(st.sampled_from(["fam", "x y", "1.5", "yes"]))
    return Profile(
        name, tuple(models), ids, labels, preds.astype(np.int64), certs, device=draw(st.sampled_from(["", "gpu"]))
    )


@settings(max_examples=40, deadline=None)
@given(profiles())
def test_round_trip_is_exact_for_random_profiles(prof: Profile) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        assert_same_profile(prof, load_profile(save_profile(prof, Path(tmp) / "p")))


# -- bad input --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bad:
    id: str
    mutate: Callable[[Path], None]
    file: str  # relative to the profile directory
    line: int | None
    column: int | str | None
    fragment: str


def edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        p = d / rel
        text = p.read_text(encoding="utf-8")
        assert old in text, (rel, old)
        p.write_text(text.replace(old, new, 1), encoding="utf-8")

    return go


def edit_bytes(rel: str, old: bytes, new: bytes) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        p = d / rel
        data = p.read_bytes()
        assert old in data, (rel, old)
        p.write_bytes(data.replace(old, new, 1))

    return go


def remove(rel: str) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        (d / rel).unlink()

    return go


BAD = [
    Bad("runtime-not-a-number", edit("profile.yaml", "8: 9.0", "8: fast"), "profile.yaml", 15, 10,
        "model 'b': runtime_ms[8] must be a number, got 'fast'"),
    Bad("runtime-zero", edit("profile.yaml", "1: 1.0", "1: 0"), "profile.yaml", 9, 10,
        "model 'a': runtime_ms[1] must be a positive number"),
    Bad("runtime-batch-size", edit("profile.yaml", "8: 4.0", "x: 4.0"), "profile.yaml", 10, 10,
        "batch size 'x' must be a positive integer"),
    Bad("memory-negative", edit("profile.yaml", "memory_mb: 20.5", "memory_mb: -1"), "profile.yaml", 12, 16,
        "model 'b': memory_mb must be a non-negative number, got '-1'"),
    Bad("memory-not-a-number", edit("profile.yaml", "memory_mb: 10", "memory_mb: ten"), "profile.yaml", 7, 16,
        "memory_mb must be a number, got 'ten'"),
    Bad("duplicate-model", edit("profile.yaml", "- name: b", "- name: a"), "profile.yaml", 11, 11,
        "duplicate model name 'a' (first defined on line 6)"),
    Bad("model-name-empty", edit("profile.yaml", "- name: b", "- name:"), "profile.yaml", 11, 10,
        "a model name must be a non-empty string"),
    Bad("model-name-list", edit("profile.yaml", "- name: b", "- name: [b]"), "profile.yaml", 11, 11,
        "a model name must be a non-empty string"),
    Bad("batch-size-twice", edit("profile.yaml", "8: 9.0", "01: 9.0"), "profile.yaml", 15, 11,
        "model 'b': batch size 1 is given twice"),
    Bad("model-missing-key", edit("profile.yaml", "    memory_mb: 20.5\n", ""), "profile.yaml", 11, 5,
        "model entry is missing 'memory_mb'"),
    Bad("no-models", edit("profile.yaml", "models:", "modelz:"), "profile.yaml", 1, 1, "missing key 'models'"),
    Bad("invalid-yaml-tab", edit("profile.yaml", "    memory_mb: 10", "\tmemory_mb: 10"), "profile.yaml", 7, 1,
        "invalid YAML"),
    Bad("invalid-yaml-bracket", edit("profile.yaml", "name: tiny", "name: [tiny"), "profile.yaml", 2, 5,
        "invalid YAML"),
    Bad("yaml-not-utf8", edit_bytes("profile.yaml", b"name: tiny", b"name: ti\xe9ny"), "profile.yaml", 1, 9,
        "not UTF-8 text (byte 0xe9)"),
    Bad("missing-yaml", remove("profile.yaml"), "profile.yaml", None, None, "missing profile.yaml"),
    Bad("labels-header", edit("labels.csv", "sample_id,label", "id,label"), "labels.csv", 1, None,
        "header must be sample_id,label, got id,label"),
    Bad("labels-duplicate", edit("labels.csv", "s3,2", "s2,2"), "labels.csv", 4, "sample_id",
        "duplicate sample_id 's2' (first on line 3)"),
    Bad("labels-not-integer", edit("labels.csv", "s2,1", "s2,one"), "labels.csv", 3, "label",
        "expected an integer class index, got 'one'"),
    Bad("labels-field-count", edit("labels.csv", "s2,1", "s2,1,7"), "labels.csv", 3, None, "expected 2 fields, got 3"),
    Bad("labels-empty", edit("labels.csv", "s1,0\ns2,1\ns3,2\n", ""), "labels.csv", 2, None, "no data rows"),
    Bad("labels-not-utf8", edit_bytes("labels.csv", b"s2,1", b"s\xe92,1"), "labels.csv", 3, 2,
        "not UTF-8 text (byte 0xe9); save the file as UTF-8"),
    Bad("preds-not-utf8-after-bom", edit_bytes("predictions/b.csv", b"sample_id", b"\xef\xbb\xbfsample_id\xff"),
        "predictions/b.csv", 1, 13, "not UTF-8 text (byte 0xff)"),
    Bad("labels-missing", remove("labels.csv"), "labels.csv", None, None, "file is missing"),
    Bad("preds-header", edit("predictions/a.csv", "prediction,certainty", "pred,certainty"), "predictions/a.csv", 1,
        None, "header must be sample_id,prediction,certainty"),
    Bad("preds-unknown-sample", edit("predictions/a.csv", "s3,2,1.0\n", "s3,2,1.0\ns9,0,0.5\n"), "predictions/a.csv",
        5, "sample_id", "sample_id 's9' is not in labels.csv"),
    Bad("preds-duplicate", edit("predictions/a.csv", "s3,2,1.0", "s2,2,1.0"), "predictions/a.csv", 4, "sample_id",
        "duplicate sample_id 's2'"),
    Bad("preds-not-integer", edit("predictions/b.csv", "s1,0,0.75", "s1,0.0,0.75"), "predictions/b.csv", 3,
        "prediction", "expected an integer class index, got '0.0'"),
    Bad("certainty-above-one", edit("predictions/a.csv", "s2,0,0.25", "s2,0,1.5"), "predictions/a.csv", 3, "certainty",
        "certainty must be a number in [0, 1], got '1.5'"),
    Bad("certainty-negative", edit("predictions/b.csv", "s2,1,0", "s2,1,-0.1"), "predictions/b.csv", 4, "certainty",
        "got '-0.1'"),
    Bad("certainty-not-a-number", edit("predictions/a.csv", "s1,0,0.9", "s1,0,high"), "predictions/a.csv", 2,
        "certainty", "got 'high'"),
    Bad("certainty-nan", edit("predictions/a.csv", "s1,0,0.9", "s1,0,nan"), "predictions/a.csv", 2, "certainty",
        "got 'nan'"),
    Bad("sample-missing-from-one-model", edit("predictions/b.csv", "s1,0,0.75\n", ""), "predictions/b.csv", None, None,
        "1 sample(s) from labels.csv have no prediction for model 'b', e.g. sample_id 's1' (labels.csv line 2)"),
    Bad("model-csv-missing", remove("predictions/b.csv"), "predictions/b.csv", None, None,
        "predictions for model 'b' are missing (declared on line 11 of"),
]  # fmt: skip


def _expected_prefix(d: Path, bad: Bad) -> str:
    where = [str(d / bad.file)]
    if bad.line is not None:
        where.append(f"line {bad.line}")
    if bad.column is not None:
        where.append(f"column {bad.column}")
    return ", ".join(where) + ": "


@pytest.mark.parametrize("bad", BAD, ids=[b.id for b in BAD])
def test_bad_input_names_file_line_and_column(tmp_path: Path, bad: Bad) -> None:
    d = write_profile(tmp_path)
    bad.mutate(d)
    with pytest.raises(ProfileError) as info:
        load_profile(d)
    e = info.value
    assert e.path == str(d / bad.file)
    assert (e.line, e.column) == (bad.line, bad.column)
    assert bad.fragment in e.message
    assert str(e).startswith(_expected_prefix(d, bad))
    assert isinstance(e, CascadeServeError)
    assert e.exit_code == 2


@pytest.mark.parametrize("bad", BAD, ids=[b.id for b in BAD])
def test_bad_input_through_the_cli_exits_2_without_traceback(
    tmp_path: Path, bad: Bad, capsys: pytest.CaptureFixture[str]
) -> None:
    d = write_profile(tmp_path)
    bad.mutate(d)
    rc = run(["profile", "show", "--profile", str(d)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.startswith("error: " + _expected_prefix(d, bad))
    assert bad.fragment in err


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="profile directory does not exist") as info:
        load_profile(tmp_path / "nope")
    assert info.value.path == str(tmp_path / "nope")


def test_model_csv_missing_names_the_declaring_yaml_line(tmp_path: Path) -> None:
    d = write_profile(tmp_path, b=None)
    with pytest.raises(ProfileError) as info:
        load_profile(d)
    assert f"declared on line 11 of {d / 'profile.yaml'}" in info.value.message


def test_blank_lines_in_csv_are_skipped(tmp_path: Path) -> None:
    d = write_profile(tmp_path, labels="sample_id,label\ns1,0\n\ns2,1\ns3,2\n\n")
    assert load_profile(d).n_samples == 3
    # line numbers still count the blank line
    edit("labels.csv", "s3,2", "s3,x")(d)
    with pytest.raises(ProfileError) as info:
        load_profile(d)
    assert (info.value.line, info.value.column) == (5, "label")


def test_a_declared_max_batch_and_batch_overhead_load_and_round_trip(tmp_path: Path) -> None:
    text = PROFILE_YAML.replace("source: hand-made\n", "source: hand-made\nbatch_overhead_ms: 0.4\n").replace(
        "      8: 4.0\n", "      8: 4.0\n    max_batch: 32\n"
    )
    prof = load_profile(write_profile(tmp_path / "in", yaml_text=text))
    assert prof.batch_overhead_ms == 0.4
    assert (prof.model("a").max_batch, prof.model("a").batch_limit) == (32, 32)
    assert (prof.model("b").max_batch, prof.model("b").batch_limit) == (None, 8)  # the largest profiled batch
    again = load_profile(save_profile(prof, tmp_path / "out"))
    assert again.batch_overhead_ms == 0.4 and again.model("a").max_batch == 32 and again.model("b").max_batch is None


@pytest.mark.parametrize("value", ["0", "2.5", "-1", "x"])
def test_a_bad_max_batch_is_named(tmp_path: Path, value: str) -> None:
    text = PROFILE_YAML.replace("      8: 4.0\n", f"      8: 4.0\n    max_batch: {value}\n")
    with pytest.raises(ProfileError, match=r"line 11, column 16: model 'a': max_batch must be a (positive|number)"):
        load_profile(write_profile(tmp_path, yaml_text=text))
