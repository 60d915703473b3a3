"""``cascadeserve simulate --sample-order`` and ``--tune`` through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_json import stdout_json

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.eval.drift_stream import SHIFT_ID_OFFSET
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import load_profile

STREAM = Path(__file__).resolve().parents[2] / "profiles" / "digits-drift" / "stream"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prof = load_profile(STREAM)
    plan = fixed_plan(prof, Cascade(("logreg", "mlp", "cnn-wide"), (0.6, 0.6)), [Device(name="d", memory_mb=1000)])
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    plan.save(out)
    return out


def test_a_drift_stream_with_tuning_answers_better_than_fixed_thresholds(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = load_profile(STREAM).sample_ids
    order = tmp_path / "order.txt"
    order.write_text("# shifted images only\n" + "\n".join(str(i) for i in ids[ids >= SHIFT_ID_OFFSET]) + "\n")
    args = ["simulate", "--profile", str(STREAM), "--plan", str(plan_file), "--json", "--sample-order", str(order)]
    args += ["--trace", "synthetic:constant:qps=100,duration=30"]
    assert run(args) == 0
    fixed = stdout_json(capsys)
    assert run([*args, "--tune", "--tune-target", "0.97", "--audit-fraction", "0.2"]) == 0
    tuned = stdout_json(capsys)
    assert fixed["requests"] == tuned["requests"] == 3000 and tuned["unanswered"] == 0
    assert tuned["accuracy"] > fixed["accuracy"] + 0.1
    changes = tuned["threshold_changes"]
    assert changes and changes[0]["old"] == [0.6, 0.6] and changes[0]["reason"] == "below target"
    assert "threshold_changes" not in fixed


@pytest.mark.parametrize(
    ("content", "message"),
    [("17\nnot-an-id\n", "order.txt:2: 'not-an-id' is not a sample id"), ("\n# nothing\n", "no sample ids")],
)
def test_a_bad_sample_order_file_is_one_line_and_exit_2(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    order = tmp_path / "order.txt"
    order.write_text(content)
    args = ["simulate", "--profile", str(STREAM), "--plan", str(plan_file), "--sample-order", str(order)]
    assert run([*args, "--trace", "synthetic:constant:qps=10,duration=1"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_tune_reference_must_be_audit_or_label(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--profile", str(STREAM), "--plan", str(plan_file), "--tune", "--tune-reference", "oracle"]
    assert run([*args, "--trace", "synthetic:constant:qps=10,duration=1"]) == 2
    assert "--tune-reference 'oracle'" in capsys.readouterr().err


LLM = Path(__file__).resolve().parents[2] / "profiles" / "llm-sst2"


def test_trace_tokens_price_each_request_by_the_traces_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same arrivals, first with each request's SST-2 review (about 30 tokens), then with the trace's prompts of
    600 tokens: the LLM stages' prefill makes every request slower; the answers are the same."""
    prof = load_profile(LLM)
    plan = fixed_plan(prof, Cascade(("smollm2-135m",), ()), [Device(name="d", memory_mb=4000)])
    plan.save(tmp_path / "plan.json")
    trace = tmp_path / "llm.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{5.0 * i},600,20\n" for i in range(12)))
    args = ["simulate", "--profile", str(LLM), "--plan", str(tmp_path / "plan.json"), "--trace", str(trace), "--json"]
    assert run(args) == 0
    own = stdout_json(capsys)
    assert run([*args, "--trace-tokens"]) == 0
    long = stdout_json(capsys)
    assert own["tokens"] == "each request's validation sample's" and long["tokens"] == "the trace's"
    assert own["requests"] == long["requests"] == 12 and own["accuracy"] == long["accuracy"]
    assert long["p50_ms"] > 3 * own["p50_ms"]


def test_trace_tokens_without_token_counts_is_one_line_and_exit_2(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--profile", str(STREAM), "--plan", str(plan_file), "--trace-tokens"]
    assert run([*args, "--trace", "synthetic:constant:qps=10,duration=1"]) == 2
    err = capsys.readouterr().err
    assert "--trace-tokens: the trace synthetic constant 10 QPS" in err and "has no token counts" in err
    trace = tmp_path / "llm.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0.0,10,1\n")
    assert run([*args, "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert "profile 'digits-shifted' has no token costs" in err and len(err.strip().splitlines()) == 1
