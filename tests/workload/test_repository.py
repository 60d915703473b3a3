"""A model repository's confinement, file by file: a load's one parameter, the folders it lists, symlinks that stay
inside (served) and paths in a models config that lead out (refused, naming the field, never the target)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.conftest import make_toy_profile
from tests.http.http_helpers import emulated_folder

from cascadeserve.errors import CascadeServeError
from cascadeserve.http.repository import LoadError
from cascadeserve.workload.repository import ModelRepository, load_parameters


def test_a_load_takes_emulate_and_nothing_else() -> None:
    assert load_parameters({}) is False and load_parameters({"emulate": True}) is True
    for params, message in [
        ({"profile": "/tmp/p"}, "parameters.profile: a load names a folder"),
        ({"file:1/model.py": "x"}, "parameters.file:1/model.py: file overrides are not taken"),
        ({"emulate": "yes"}, "parameters.emulate: true or false"),
        ({"colour": 1}, "parameters.colour: unknown"),
    ]:
        with pytest.raises(LoadError, match=message):
            load_parameters(params)


def test_the_repository_itself_must_be_a_folder_and_not_a_system_one(tmp_path: Path) -> None:
    with pytest.raises(CascadeServeError, match=r"--model-repository: .* is not a folder"):
        ModelRepository(tmp_path / "missing")
    with pytest.raises(CascadeServeError, match="is a system folder"):
        ModelRepository("/proc")


def test_symlinks_inside_are_served_and_paths_out_of_a_models_config_are_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    prof = make_toy_profile(n=200, seed=3)
    emulated_folder(repo, "a", prof)
    os.symlink(repo / "a", repo / "alias")  # a folder linked inside: the same cascade under a second name
    (repo / "not a name").mkdir()
    (repo / "README").write_text("not a folder")
    r = ModelRepository(repo)
    assert r.names() == ["a", "alias"]
    files = r.files("alias", emulate=True)
    assert files.plan == (repo / "a" / "plan.json").resolve() and files.models is None

    (tmp_path / "weights.pkl").write_bytes(b"pickled")
    cases = {
        "ref: ../../weights.pkl": "a/models.yaml: models[0].ref: leads outside",
        f"ref: {tmp_path / 'weights.pkl'}": "a/models.yaml: models[0].ref: leads outside",
        f"ref: x:y\n    options: {{tokenizer: {tmp_path}}}": "models[0].options.tokenizer: leads outside",
    }
    for line, message in cases.items():
        adapter = "callable" if line.startswith("ref: x:y") else "sklearn"
        (repo / "a" / "models.yaml").write_text(f"models:\n  - name: m0\n    adapter: {adapter}\n    {line}\n")
        with pytest.raises(LoadError) as e:
            r.files("a", emulate=False)
        assert message in r.shown(str(e.value)) and str(tmp_path) not in r.shown(str(e.value)), e.value
    (repo / "a" / "models.yaml").write_text("models:\n  - name: m0\n    adapter: sklearn\n    ref: m0.pkl\n")
    assert r.files("a", emulate=False).models == (repo / "a" / "models.yaml").resolve()  # a file inside: fine
