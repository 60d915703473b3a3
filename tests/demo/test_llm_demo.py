"""``demo --llm`` end to end on the real PyPI-shipped LLMs, at its smallest: profile, plan, serve behind the OpenAI
API on 127.0.0.1, replay, and each model alone; every request of every replay answered."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")


def test_the_llm_demo_serves_a_cascade_and_each_model_alone(tmp_path: Path) -> None:
    from cascadeserve.demo.llm import LLMDemoOptions, run_llm_demo

    said: list[str] = []
    opts = LLMDemoOptions(quick=True, out=tmp_path, limit=8, seconds=8.0, load=0.3)
    res = run_llm_demo(opts, say=said.append)
    assert res.ok
    assert [r.name for r in res.replays] == ["cascadeserve (gear plan)", "smollm2-135m alone", "gemma3-270m alone"]
    for r in res.replays:  # nothing lost, and the OpenAI replies named an existing stage
        assert np.isfinite(r.latency_ms).all() and r.errors == []
        assert set(r.stage.tolist()) <= {0, 1}
    assert (tmp_path / "plan.json").is_file() and (tmp_path / "models.yaml").is_file()
    assert any(line.startswith("plan: ") for line in said)
    assert len(res.summary) == 4 and "accuracy" in res.summary[0]
