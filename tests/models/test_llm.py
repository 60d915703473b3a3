"""LocalLLM and LLMAdapter on the real PyPI-shipped models: scoring, left padding, generation, token counts."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from cascadeserve.models.base import Generated
from cascadeserve.models.llm_adapter import LLMAdapter
from cascadeserve.models.llm_prompts import LLMItem, decode_item, encode_item

ITEMS = [
    {"prompt": "Question: What color is the sky on a clear day?\nAnswer:", "options": [" blue", " green"]},
    {
        "prompt": "Question: Which animal is the largest?\nAnswer:",
        "options": [" an ant", " a blue whale", " a cat", " a mouse"],
    },
    {"prompt": "Review: a dull, lifeless film.\nSentiment:", "options": [" negative", " positive"]},
]


def test_scores_have_one_row_per_item_and_sum_to_one(smollm: LLMAdapter) -> None:
    batch = [json.dumps(it) for it in ITEMS]  # what a V2 BYTES row carries
    scores = smollm.predict(batch)
    assert scores.shape == (3, 4)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-9)
    # items with fewer options than the widest get probability 0 in the extra columns
    assert scores[0, 2:].tolist() == [0.0, 0.0] and scores[2, 2:].tolist() == [0.0, 0.0]
    assert scores[0].argmax() == 0 and scores[1].argmax() == 1  # the sky is blue; the whale is largest


def test_items_may_be_dicts_dataclasses_or_raw_dataset_rows(smollm: LLMAdapter) -> None:
    row = {"sentence": "a dull, lifeless film.", "label": 0}  # SST-2's own row
    item = LLMItem("Review: a dull, lifeless film.\nSentiment:", (" negative", " positive"))
    a, b, c = smollm.predict([row, item, encode_item(item).encode()])
    np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(b, c)
    with pytest.raises(ValueError, match="row 0"):
        smollm.predict(['{"options": [" a", " b"]}'])


SHORT = [{"prompt": "The sky is", "options": [" blue", " green"]}, {"prompt": "Q: 2+2?\nA:", "options": [" 4", " 5"]}]


@pytest.mark.parametrize(("which", "items"), [("smollm", ITEMS[:2]), ("gemma", SHORT)])
def test_left_padding_scores_as_one_by_one(
    which: str, items: list[dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    model: LLMAdapter = request.getfixturevalue(which)
    llm = model.model
    prompts = [it["prompt"] for it in items]
    options = [it["options"] for it in items]
    together = llm.score(prompts, options)
    alone = [llm.score([p], [o])[0] for p, o in zip(prompts, options, strict=True)]
    for t, a in zip(together, alone, strict=True):
        np.testing.assert_allclose(t, a, atol=1e-4)
    # length normalisation: the mean log-likelihood per option token, so the sum is the mean times the tokens
    sums = llm.score(prompts[:1], options[:1], normalise=False)[0]
    tokens = [llm.token_counts("x", [o])[1] for o in options[0]]
    np.testing.assert_allclose(sums, together[0] * np.asarray(tokens), rtol=1e-5)


def test_generation_stops_at_the_cap_and_counts_tokens(smollm: LLMAdapter) -> None:
    llm = smollm.model
    prompt = "Write a long story about a dragon who learns to cook."
    (gen,) = llm.generate([prompt], max_new_tokens=3)
    assert gen.output_tokens == 3 and len(gen.token_logprobs) == 3
    assert gen.prompt_tokens == len(llm.tokenizer(llm.format(prompt), add_special_tokens=False)["input_ids"])
    assert "<|im_start|>" in llm.format(prompt)  # SmolLM2's chat template wraps the prompt
    assert all(lp <= 0 for lp in gen.token_logprobs) and 0.0 <= gen.first_token_margin <= 1.0


def test_batched_generation_is_greedy_and_stops_at_end_or_string(smollm: LLMAdapter, gemma: LLMAdapter) -> None:
    llm = smollm.model
    prompts = ["What is the capital of France? Answer in one word.", "Say hello."]
    batched = llm.generate(prompts, max_new_tokens=6)
    alone = [llm.generate([p], max_new_tokens=6)[0] for p in prompts]
    assert [g.text for g in batched] == [g.text for g in alone]  # left padding does not change greedy answers
    for g in batched:
        # greedy: the first token is the most likely one, so its probability exceeds the margin over the second
        assert math.exp(g.token_logprobs[0]) >= g.first_token_margin - 1e-6
        assert g.output_tokens == len(g.token_logprobs) <= 6
    assert "Paris" in batched[0].text
    # Gemma 3 270M's GGUF has no chat template: the plain prompt, with BOS, and the new line ends the answer
    (g,) = gemma.generate(['{"prompt": "Question: what is the capital of France?\\nAnswer:"}'], max_new_tokens=6)
    glm = gemma.model
    assert not glm.has_chat_template
    assert g.prompt_tokens == len(glm.tokenizer("Question: what is the capital of France?\nAnswer:")["input_ids"])
    assert "\n" not in g.text and g.output_tokens <= 6


def test_each_row_decodes_as_its_item_asks(smollm: LLMAdapter, gemma: LLMAdapter) -> None:
    story = "Write a long story about a dragon."
    rows = [
        {"prompt": story, "max_new_tokens": 12, "ignore_eos": True},  # above the stage's own cap (8)
        {"prompt": story, "max_new_tokens": 2},
        {"prompt": story, "temperature": 0.9, "top_p": 0.9, "seed": 5, "max_new_tokens": 4},
    ]
    out = smollm([json.dumps(r) for r in rows])  # one batch, each row by its own rules
    assert isinstance(out, Generated)
    assert [o.output_tokens for o in out.outputs] == [12, 2, 4]
    assert [o.finish_reason for o in out.outputs] == ["length"] * 3
    alone = smollm([json.dumps(rows[2])])
    assert isinstance(alone, Generated) and alone.outputs[0].text == out.outputs[2].text  # the seed's own draw
    # a chat on a model without a chat template: the conversation as labelled lines, answered after "Assistant:"
    chat = {"prompt": "-", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    assert gemma.model.format(decode_item(chat)).endswith("User: What is the capital of France?\nAssistant:")
    answer = gemma([json.dumps({**chat, "max_new_tokens": 10})])
    assert isinstance(answer, Generated) and "Paris" in answer.outputs[0].text


def test_memory_and_cost_model(smollm: LLMAdapter) -> None:
    llm = smollm.model
    # SmolLM2-135M: 30 layers, 3 KV heads of 64, float32 -> 2 * 30 * 3 * 64 * 4 bytes per token
    assert llm.kv_cache_mb_per_token() == pytest.approx(2 * 30 * 3 * 64 * 4 / 1e6)
    assert 400 < (smollm.memory_mb() or 0) < 700  # 135M float32 parameters (embeddings tied)
    prefill, decode = llm.time_costs(2, 16, steps=2)
    assert prefill > 0 and decode > 0


def test_a_gguf_files_cache_key_follows_its_content_not_its_path(tmp_path: Any) -> None:
    # every install of one file (another venv, a fresh clone) shares the converted copy; a changed file does not
    from cascadeserve.models.llm import _content_key

    body = bytes(range(256)) * 12_000  # 3 MB: the first and last MiB differ from the middle
    a, b = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    for p in (a, b):
        p.parent.mkdir()
        p.write_bytes(body)
    assert _content_key(a) == _content_key(b)
    b.write_bytes(body[:-1] + b"\x00")  # the last byte changed
    assert _content_key(a) != _content_key(b)
    b.write_bytes(body + b"x")  # same head and nearly the same tail, another size
    assert _content_key(a) != _content_key(b)
