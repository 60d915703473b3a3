"""The Ray backend's model sources come from the one reader of a models config (no Ray instance needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadeserve.errors import CascadeServeError

pytest.importorskip("ray")
from cascadeserve.backends.ray import model_sources


def test_model_sources_of_the_factory_form(tmp_path: Path) -> None:
    p = tmp_path / "models.yaml"
    p.write_text("models:\n  m0: pkg.mod:make\n  m1: {factory: pkg.mod:make, kwargs: {width: 2}}\n")
    assert model_sources(p) == {"m0": ("pkg.mod:make", {}), "m1": ("pkg.mod:make", {"width": 2})}


def test_an_adapter_config_has_no_sources_and_a_bad_file_names_its_field(tmp_path: Path) -> None:
    p = tmp_path / "models.yaml"
    p.write_text("models:\n  - {name: a, adapter: callable, ref: m:f}\n")
    assert model_sources(p) is None  # its models are built by the front end and shipped pickled
    p.write_text("models: {m0: nope}\n")
    with pytest.raises(CascadeServeError, match=r"models\.m0\.factory"):
        model_sources(p)
