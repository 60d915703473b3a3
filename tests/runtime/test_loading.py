"""The factory form of a models config (``models:`` maps names to ``module:factory``), read through the one
reader of the file (:func:`cascadeserve.models.config.load_models_file`) by the runtime's ``load_model_config``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from cascadeserve.errors import CascadeServeError
from cascadeserve.models.config import FactoryModelsConfig, ModelsConfig, load_models_file
from cascadeserve.runtime import InputSpec, load_model_config

FACTORY = """
import numpy as np

def make(width=3):
    return lambda batch: np.ones((len(batch), width))
"""


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "cs_loading_factories.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "cs_loading_factories"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "models.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_factory_form_loads_every_model_with_its_kwargs_and_input(tmp_path: Path, factories: str) -> None:
    p = _write(
        tmp_path,
        f"""
        input: {{name: x, datatype: fp32, shape: [-1, 4]}}
        certainty: max_probability
        models:
          m0: {factories}:make
          m1: {{factory: {factories}:make, kwargs: {{width: 5}}}}
        """,
    )
    assert isinstance(load_models_file(p), FactoryModelsConfig)
    cfg = load_model_config(p)
    assert cfg.input == InputSpec("x", "FP32", (-1, 4)) and cfg.certainty == "max_probability"
    assert np.asarray(cfg.models["m0"](np.zeros((2, 4)))).shape == (2, 3)
    assert np.asarray(cfg.models["m1"](np.zeros((2, 4)))).shape == (2, 5)


def test_factory_form_without_input_takes_sample_ids(tmp_path: Path, factories: str) -> None:
    cfg = load_model_config(_write(tmp_path, f"models: {{m0: '{factories}:make'}}"))
    assert cfg.input == InputSpec() and cfg.certainty == "margin"


def test_a_models_list_is_the_adapter_form(tmp_path: Path) -> None:
    p = _write(tmp_path, "models:\n  - {name: a, adapter: callable, ref: m:f}")
    assert isinstance(load_models_file(p), ModelsConfig)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("models: {m0: not-a-ref}", r"models\.m0\.factory: 'not-a-ref' must look like 'package.module:factory'"),
        ("models: {m0: {kwargs: {}}}", r"models\.m0\.factory: Field required"),
        ("models: {m0: 3}", r"models\.m0"),
        ("models: {}", r"models"),
        ("input: {datatype: FP99}\nmodels: {m0: a.b:c}", r"input\.datatype: 'FP99' is not one of"),
        ("colour: red\nmodels: {m0: a.b:c}", r"colour: Extra inputs"),
        ("[1, 2]", r"expected a mapping"),
    ],
)
def test_bad_factory_configs_name_the_file_and_field(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(CascadeServeError, match=rf"models\.yaml: .*{message}"):
        load_model_config(_write(tmp_path, body))
