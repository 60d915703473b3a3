"""Profiling LLM stages: ``profile measure`` on real JSONL rows writes a loadable profile with its LLM side files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tests.cli_json import stdout_json

from cascadeserve.cli import run
from cascadeserve.models import MeasureOptions, load_models_config, load_validation, measure
from cascadeserve.models.llm_adapter import LLMAdapter
from cascadeserve.profile import load_profile
from cascadeserve.profile.llm_side import read_calibration, read_costs, read_signals, read_tokens

CONFIG = """
certainty: option-margin
threads: 1
models:
  - name: smollm2-135m
    adapter: llm
    ref: cascadeserve.models.families.llm:smollm2_135m
    options: {max_new_tokens: 8}
"""


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(textwrap.dedent(CONFIG))
    return path


def test_profile_measure_writes_a_loadable_llm_profile(
    config: Path, shared_data: Path, tmp_path: Path, smollm: LLMAdapter, capsys: pytest.CaptureFixture[str]
) -> None:
    sst2 = shared_data / "datasets" / "llm" / "sst2_validation.jsonl"
    out = tmp_path / "llm-sst2"
    argv = ["profile", "measure", "--models", str(config), "--validation", str(sst2), "--out", str(out)]
    assert run([*argv, "--limit", "8", "--batch-sizes", "1", "--repeats", "1", "--warmup", "0", "--json"]) == 0
    capsys.readouterr()
    prof = load_profile(out)
    first8 = [json.loads(line)["label"] for line in sst2.read_text().splitlines()[:8]]
    assert prof.n_samples == 8 and prof.labels.tolist() == first8
    assert set(prof.predictions[0].tolist()) <= {0, 1}
    _, correct, signals = read_signals(out, "smollm2-135m") or ([], np.array([]), {})
    assert correct.tolist() == (prof.predictions[0] == prof.labels).tolist()
    np.testing.assert_allclose(signals["option-margin"], prof.certainties[0])  # the profile's certainty column
    tokens = read_tokens(out, "smollm2-135m")
    assert tokens is not None and (tokens.prompt_tokens > 10).all() and (tokens.scored_tokens >= 2).all()
    costs = read_costs(out)["smollm2-135m"]
    assert costs.task == "llm-scoring" and set(costs.prefill_ms_per_token) == {1}
    assert costs.kv_cache_mb_per_token > 0 and costs.weights_mb > 400
    # the fixed and per-token parts were fitted on random batches of the set: both there, neither negative
    assert set(costs.fixed_ms) == {1} and costs.fixed_ms[1] >= 0 and costs.prefill_ms_per_token[1] >= 0
    assert costs.fixed_ms[1] + costs.prefill_ms_per_token[1] > 0
    tc = prof.models[0].tokens  # the profile prices this stage's batches by their tokens
    assert tc is not None and tc.work_tokens.tolist() == (tokens.prompt_tokens + tokens.scored_tokens).tolist()
    assert set(read_calibration(out)["smollm2-135m"]) == set(signals)
    # the interchange format's readers work on it as on any profile
    assert run(["profile", "frontier", "--profile", str(out), "--json"]) == 0
    assert stdout_json(capsys)["frontier"]
    assert run(["profile", "signals", "--profile", str(out), "--json"]) == 0
    assert {r["signal"] for r in stdout_json(capsys)["signals"]} == set(signals)
    plan = tmp_path / "plan.json"
    fixed = ["plan", "fixed", "--profile", str(out), "--cascade", "smollm2-135m", "--devices", "1"]
    assert run([*fixed, "--device-memory-mb", "4000", "--out", str(plan)]) == 0
    capsys.readouterr()
    trace = "synthetic:constant:qps=0.5,duration=10"
    assert run(["simulate", "--profile", str(out), "--plan", str(plan), "--trace", trace, "--json"]) == 0
    sim = stdout_json(capsys)
    assert sim["completed"] == sim["requests"] > 0 and 0.0 <= sim["accuracy"] <= 1.0


def test_generation_sets_record_right_or_wrong_and_the_texts(
    config: Path, shared_data: Path, tmp_path: Path, smollm: LLMAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(smollm.model, "max_new_tokens", 4)  # short answers keep the test short
    data = load_validation(shared_data / "datasets" / "llm" / "nq_open_validation.jsonl", limit=3)
    cfg = load_models_config(config)
    opts = MeasureOptions(batch_sizes=(1,), repeats=1, warmup=0)
    prof, (rec,) = measure(cfg, data, tmp_path / "nq", options=opts, models={"smollm2-135m": smollm})
    assert prof.labels.tolist() == [1, 1, 1] and set(rec.predictions.tolist()) <= {0, 1}
    lines = (tmp_path / "nq" / "llm" / "outputs" / "smollm2-135m.jsonl").read_text().splitlines()
    assert [json.loads(x)["correct"] for x in lines] == [bool(p) for p in rec.predictions]
    _, _, signals = read_signals(tmp_path / "nq", "smollm2-135m") or ([], np.array([]), {})
    assert set(signals) == {"mean-logprob", "min-logprob", "q10-logprob", "first-token-margin"}
    np.testing.assert_allclose(signals["mean-logprob"], prof.certainties[0])  # the generation default
    tokens = read_tokens(tmp_path / "nq", "smollm2-135m")
    assert tokens is not None and (tokens.output_tokens >= 1).all() and (tokens.output_tokens <= 4).all()
    assert read_costs(tmp_path / "nq")["smollm2-135m"].mean_output_tokens == pytest.approx(tokens.output_tokens.mean())


def test_bad_jsonl_rows_are_one_line_errors(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"sentence": "fine", "label": 1}\n{"sentence": "fine", "label": "positive"}\n')
    code = run(["profile", "measure", "--models", str(config), "--validation", str(data), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and f"{data}, line 2: field 'label' must be 0 or 1" in err


def test_certainty_names_resolve_per_task() -> None:
    from cascadeserve.models.base import ModelLoadError
    from cascadeserve.models.llm_profile import resolve_signal

    assert resolve_signal("llm-scoring", "margin") == ("option-margin", False)  # the config default
    assert resolve_signal("llm-generation", "margin") == ("mean-logprob", False)  # a scoring name: the default
    assert resolve_signal("llm-generation", "calibrated-min-logprob") == ("min-logprob", True)
    assert resolve_signal("llm-scoring", "mean-logprob") == ("option-margin", False)
    with pytest.raises(ModelLoadError, match="unknown LLM certainty signal 'bogus'"):
        resolve_signal("llm-scoring", "bogus")


def test_a_batch_size_costs_its_whole_set_mean_not_its_draws_luck() -> None:
    from cascadeserve.models.llm_profile import _whole_set_mean

    same = np.full(50, 20)
    # every prompt is 20 tokens: the draws' longest was 20 too, so the timed mean stands
    assert _whole_set_mean(300.0, 2, (np.full(8, 20.0), 3.0), (np.zeros(8), 9.0), (same, np.zeros(50))) == 300.0
    # the draws happened to be short (longest 10 on average): 10 tokens more at 3 ms each, and 2 answer tokens more
    # at 9 ms a step
    got = _whole_set_mean(300.0, 4, (np.full(8, 10.0), 3.0), (np.zeros(8), 9.0), (same, np.full(50, 2)))
    assert got == pytest.approx(300.0 + 30.0 + 18.0)
    # one long prompt in a set of short ones: a batch of 4 holds it about 4/50 of the time, so the expected longest
    # rises by about (100 - 10) * (1 - (49/50)^4) tokens
    mixed = np.r_[np.full(49, 10), 100]
    got = _whole_set_mean(300.0, 4, (np.full(8, 10.0), 1.0), (np.zeros(8), 0.0), (mixed, np.zeros(50)))
    assert got == pytest.approx(300.0 + 90 * (1 - (49 / 50) ** 4), rel=0.1)
