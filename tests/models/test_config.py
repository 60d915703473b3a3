"""The models config: validation errors name the file and field (and model); refs, paths and preprocessing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from cascadeserve.errors import CascadeServeError
from cascadeserve.models import ModelLoadError, load_models_config
from cascadeserve.models.config import load_models_file
from cascadeserve.runtime import load_model_config

FACTORY = """
import numpy as np

def make(classes=3, bias=0.0):
    def f(batch):
        x = np.asarray(batch, dtype=float)
        return np.stack([x.sum(axis=1) * (k + 1) + bias for k in range(classes)], axis=1)
    return f

def double(batch):
    return np.asarray(batch) * 2

def join(batch):  # a model of several input tensors: one array per input name
    return np.hstack([batch["ids"], batch["mask"]])
"""


@pytest.fixture()
def factory_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "cs_test_factories.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "cs_test_factories"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "models.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_a_valid_config_builds_callable_adapters_with_preprocessing(tmp_path: Path, factory_module: str) -> None:
    p = write(
        tmp_path,
        f"""
        certainty: margin
        input: {{name: x, datatype: fp32, shape: [-1, 4]}}
        models:
          - name: small
            adapter: callable
            ref: {factory_module}:make
            kwargs: {{classes: 2}}
            preprocess: {{function: {factory_module}:double, dtype: float32, scale: 0.5, reshape: [4]}}
            postprocess: numpy:squeeze
          - {{name: big, adapter: callable, ref: "{factory_module}:make", memory_mb: 12}}
        """,
    )
    cfg = load_models_config(p)
    assert [m.name for m in cfg.models] == ["small", "big"] and cfg.input.datatype == "FP32"
    models = cfg.build()
    x = np.ones((5, 4))
    assert models["big"].predict(x).shape == (5, 3)
    # double, float32, then scale 0.5 gives ones again; each row sums to 4, class k scores 4 * (k + 1)
    np.testing.assert_allclose(models["small"].predict(x), np.tile([4.0, 8.0], (5, 1)))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("models: []", r"models: List should have at least 1 item"),
        ("models:\n  - {name: a, adapter: keras, ref: m:f}", r"models\[0\]\.adapter \(model 'a'\): Input should be"),
        ("models:\n  - {name: a, adapter: torch}", r"models\[0\]\.ref \(model 'a'\): Field required"),
        ("models:\n  - {name: a, adapter: torch, ref: m:f, memory_mb: -1}", r"models\[0\]\.memory_mb \(model 'a'\)"),
        ("models:\n  - {name: a, adapter: torch, ref: m:f, colour: red}", r"models\[0\]\.colour.*Extra inputs"),
        (
            "models:\n  - {name: a, adapter: torch, ref: m:f}\n  - {name: a, adapter: torch, ref: m:g}",
            r"models: duplicate model names: a",
        ),
        ("models:\n  - {name: a/b, adapter: torch, ref: m:f}", r"models\[0\]\.name"),
        ("[1, 2]", r"expected a mapping"),
        ("models: [", r"invalid YAML"),
        (
            "input: {name: x}\ninputs: [{name: a}]\nmodels:\n  - {name: m, adapter: torch, ref: m:f}",
            r"give 'input' \(one tensor\) or 'inputs' \(several\), not both",
        ),
        (
            "inputs: [{name: a}, {name: a}]\nmodels:\n  - {name: m, adapter: torch, ref: m:f}",
            r"inputs: .*duplicate input names: a",
        ),
        ("inputs: []\nmodels:\n  - {name: m, adapter: torch, ref: m:f}", r"inputs: List should have at least 1 item"),
        (
            "inputs: [{name: a, shape: [3]}]\nmodels:\n  - {name: m, adapter: torch, ref: m:f}",
            r"inputs\[0\]\.shape: \[3\]: the first dimension is the batch",
        ),
    ],
)
def test_bad_configs_name_the_file_and_field(tmp_path: Path, body: str, message: str) -> None:
    p = write(tmp_path, body)
    with pytest.raises(CascadeServeError, match=message) as e:
        load_models_config(p)
    assert str(p) in str(e.value)


M = "\nmodels:\n  - {name: m, adapter: torch, ref: m:f}"


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ("[a, b, a]", r"labels: duplicate class names: a$"),
        ("{0: a, 2: a}", r"labels: duplicate class names: a$"),
        ("[a, '', c]", r"labels: label 1: the class name must be a non-empty string, got ''$"),
        ("[a, '  ']", r"labels: label 1: the class name must be a non-empty string, got '  '$"),
        ("[a, 3]", r"labels: label 1: the class name must be a non-empty string, got 3$"),
        ("{-1: a}", r"labels: -1 is not a label \(labels are non-negative integers\)$"),
        ("{x: a}", r"labels: 'x' is not a label \(labels are non-negative integers\)$"),
        ("[]", r"labels: no class names: give one per label, or leave 'labels' out$"),
        ("negative", r"labels: expected a list of class names \(label 0 first\) or a mapping of label to class name$"),
    ],
)
def test_bad_label_names_name_the_file_and_field(tmp_path: Path, labels: str, message: str) -> None:
    for form in (M, "\nmodels: {m: a.b:c}"):  # the adapter form and the factory form alike
        p = write(tmp_path, f"labels: {labels}{form}")
        with pytest.raises(CascadeServeError, match=message) as e:
            load_models_file(p)
        assert str(e.value).startswith(f"{p}: labels: ")


def test_label_names_by_list_or_mapping(tmp_path: Path) -> None:
    assert load_models_config(write(tmp_path, "labels: [neg, pos]" + M)).label_names == {0: "neg", 1: "pos"}
    assert load_models_config(write(tmp_path, "labels: {1: pos, 0: neg}" + M)).label_names == {1: "pos", 0: "neg"}
    assert load_models_config(write(tmp_path, "labels: {'3': three}" + M)).label_names == {3: "three"}
    assert load_models_config(write(tmp_path, M)).label_names is None


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(CascadeServeError, match="cannot read the models config"):
        load_models_config(tmp_path / "nope.yaml")


def test_unimportable_reference_names_the_model(tmp_path: Path) -> None:
    p = write(tmp_path, "models:\n  - {name: ghost, adapter: callable, ref: no_such_module_xyz:make}")
    with pytest.raises(ModelLoadError, match=r"model 'ghost': ref 'no_such_module_xyz:make': cannot import"):
        load_models_config(p).build()["ghost"].load()


def test_relative_paths_resolve_against_the_config_file(tmp_path: Path) -> None:
    p = write(tmp_path, "models:\n  - {name: lr, adapter: sklearn, ref: weights/lr.pkl}")
    with pytest.raises(ModelLoadError, match=r"model 'lr': no such file .*weights/lr.pkl"):
        load_models_config(p).build()["lr"].load()


def test_serve_reads_an_adapter_config_through_the_runtime_hook(tmp_path: Path, factory_module: str) -> None:
    p = write(
        tmp_path,
        f"""
        certainty: margin
        input: {{name: x, datatype: FP32, shape: [-1, 4]}}
        models:
          - {{name: a, adapter: callable, ref: "{factory_module}:make"}}
        """,
    )
    cfg = load_model_config(p)
    assert set(cfg.models) == {"a"} and cfg.input.name == "x" and cfg.input.shape == (-1, 4)
    assert np.asarray(cfg.models["a"](np.ones((2, 4)))).shape == (2, 3)


def _threads_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize(
    ("top", "per_model", "devices", "cores", "asked"),
    [
        ("threads: 2\n", "", 2, 2, 4),  # the old LLM example: 2 devices × 2 threads on 2 cores
        ("", "", 2, 2, 4),  # unset: torch's default is one thread per core
        ("threads: 1\n", "    threads: 3\n", 1, 2, 3),  # a model's own count wins over the file's
        ("threads: 2\n", "", 3, 4, 6),
    ],
)
def test_devices_asking_for_more_threads_than_cores_are_named(
    tmp_path: Path, top: str, per_model: str, devices: int, cores: int, asked: int
) -> None:
    body = f"{top}models:\n  - name: a\n    adapter: llm\n    ref: m:f\n{per_model}"
    cfg = load_models_config(_threads_config(tmp_path, body))
    note = cfg.oversubscription(devices, cores)
    assert note is not None
    assert f"ask for {asked} threads on {cores} cores" in note
    assert f"threads: {max(1, cores // devices)}" in note


@pytest.mark.parametrize(
    ("body", "devices", "cores"),
    [
        ("threads: 1\nmodels:\n  - {name: a, adapter: llm, ref: 'm:f'}\n", 2, 2),
        ("threads: 2\nmodels:\n  - {name: a, adapter: torch, ref: 'm:f'}\n", 2, 4),
        # scikit-learn runs on the device's own thread; a GPU model's threads are not the host's cores
        ("threads: 8\nmodels:\n  - {name: a, adapter: sklearn, ref: 'm:f'}\n", 2, 2),
        ("threads: 8\nmodels:\n  - {name: a, adapter: torch, ref: 'm:f', device: cuda}\n", 2, 2),
    ],
)
def test_threads_that_fit_the_cores_raise_no_warning(tmp_path: Path, body: str, devices: int, cores: int) -> None:
    assert load_models_config(_threads_config(tmp_path, body)).oversubscription(devices, cores) is None


def test_a_model_of_several_input_tensors_gets_each_rows_by_name(tmp_path: Path, factory_module: str) -> None:
    """``inputs`` lists the tensors; the runtime's view keeps their order, and a batch of rows (each a mapping)
    reaches a callable model as one array per input."""
    p = write(
        tmp_path,
        f"""
        inputs:
          - {{name: ids, datatype: int64, shape: [-1, 3]}}
          - {{name: mask, datatype: int64, shape: [-1, 3]}}
        models:
          - name: m
            adapter: callable
            ref: "{factory_module}:make"
            preprocess: {{function: "{factory_module}:join"}}
        """,
    )
    cfg = load_models_config(p)
    assert [(i.name, i.datatype, i.shape) for i in cfg.input_list] == [
        ("ids", "INT64", [-1, 3]),
        ("mask", "INT64", [-1, 3]),
    ]
    runtime_cfg = load_model_config(p)
    assert [i.name for i in runtime_cfg.inputs] == ["ids", "mask"] and runtime_cfg.input.name == "ids"
    from cascadeserve.runtime.device import batch_of

    batch = batch_of([{"ids": np.array([1, 2, 3]), "mask": np.array([1, 1, 0])}] * 2)
    scores = runtime_cfg.models["m"](batch)  # each row [1, 2, 3, 1, 1, 0] sums to 8: class k scores 8 * (k + 1)
    np.testing.assert_allclose(scores, [[8.0, 16.0, 24.0]] * 2)
