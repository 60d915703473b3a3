"""The JSONL formats of the LLM sets, their prompts, the item encoding, and answer normalisation (no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascadeserve.models import load_validation
from cascadeserve.models.dataset import ValidationDataError
from cascadeserve.models.llm_prompts import (
    LLMItem,
    decode_item,
    encode_item,
    is_correct,
    load_jsonl,
    normalise_answer,
    row_to_item,
)

ARC = {"id": "q1", "question": "Which is a gas?", "choices": ["ice", "steam"], "labels": ["A", "B"], "answer": "B"}
BOOLQ = {"question": "is water wet", "passage": "Water is a liquid.", "answer": True}
SST2 = {"sentence": "a fine film .", "label": 1}
NQ = {"question": "who wrote hamlet", "answers": ["William Shakespeare", "Shakespeare"]}


def test_each_format_gets_its_documented_prompt() -> None:
    assert row_to_item(ARC) == LLMItem("Question: Which is a gas?\nAnswer:", (" ice", " steam"), label=1)
    mmlu = row_to_item({**ARC, "subject": "high_school_physics"})
    assert mmlu.prompt.startswith("The following is a question about high school physics.\nQuestion:")
    assert row_to_item(BOOLQ) == LLMItem(
        "Water is a liquid.\nQuestion: is water wet?\nAnswer:", (" no", " yes"), label=1
    )
    assert row_to_item(SST2) == LLMItem("Review: a fine film .\nSentiment:", (" negative", " positive"), label=1)
    nq = row_to_item(NQ)
    assert nq.options is None and nq.answers == ("William Shakespeare", "Shakespeare")
    assert nq.prompt == "Answer the question with a few words.\nQuestion: who wrote hamlet?\nAnswer:"


def test_item_encoding_round_trips_and_rejects_bad_items() -> None:
    item = LLMItem("p", (" a", " b"))
    assert decode_item(encode_item(item)) == item
    assert decode_item(encode_item(item).encode("utf-8")) == item
    assert decode_item(json.dumps(ARC)).options == (" ice", " steam")  # a raw dataset row is an item too
    for bad, msg in [
        ('{"prompt": "p", "options": [" a"]}', "at least 2"),
        ('{"prompt": ""}', "non-empty"),
        ("[1, 2]", "JSON object"),
        ("not json", "JSON object"),
        ('{"question": "q"}', "unknown row format"),
    ]:
        with pytest.raises(ValueError, match=msg):
            decode_item(bad)


def test_answers_are_normalised_before_matching() -> None:
    assert normalise_answer("The  Beatles!") == "beatles"
    assert normalise_answer("An apple, a day.") == "apple day"
    assert is_correct("shakespeare.", NQ["answers"]) and is_correct("William  Shakespeare", NQ["answers"])
    assert not is_correct("Marlowe", NQ["answers"]) and not is_correct("the", ["the"])  # empty after normalising


def test_load_jsonl_reads_labels_ids_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "arc.jsonl"
    rows = [ARC, {**ARC, "id": "q2", "answer": "A"}, {**ARC, "id": "q3"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    data = load_validation(path, limit=2)
    assert data.task == "llm-scoring" and len(data) == 2
    assert data.labels.tolist() == [1, 0] and data.sample_ids.tolist() == ["q1", "q2"]
    assert decode_item(data.inputs[0]).options == (" ice", " steam")
    nq = tmp_path / "nq.jsonl"
    nq.write_text(json.dumps(NQ) + "\n" + json.dumps({**NQ, "question": "who wrote macbeth"}) + "\n")
    gen = load_jsonl(nq)
    assert gen.task == "llm-generation" and gen.labels.tolist() == [1, 1] and gen.sample_ids.tolist() == [0, 1]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: "),
        (json.dumps({**ARC, "answer": "Z"}), "line 2: field 'answer' must be one of the labels"),
        (json.dumps({"sentence": "x", "label": 3}), "line 2: field 'label' must be 0 or 1"),
        (json.dumps(NQ), "line 2: a llm-generation row in a llm-scoring file"),
        (json.dumps(ARC), "line 2: duplicate id 'q1' (first on line 1)"),
    ],
)
def test_bad_rows_name_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ARC) + "\n" + line + "\n")
    with pytest.raises(ValidationDataError) as e:
        load_jsonl(path)
    assert str(e.value).startswith(f"{path}, ") and message in str(e.value) and "\n" not in str(e.value)
