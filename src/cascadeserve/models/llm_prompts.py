"""Labelled sets for LLM stages: the JSONL formats, the prompts built from them, and how an item travels.

An **item** is what an LLM stage is asked: a prompt and, for a scoring task, its options. It travels as one JSON
object per row, so that the profiler, the runtime's queues and the HTTP V2 path (a ``BYTES`` tensor, one UTF-8
string per row) all carry the same thing::

    {"prompt": "Question: Which gas do plants take in?\\nAnswer:", "options": [" oxygen", " carbon dioxide"]}
    {"prompt": "Question: who wrote hamlet?\\nAnswer:", "answers": ["William Shakespeare"]}   # generation

``options`` present: a **scoring** item (the stage scores each option as a continuation of the prompt and picks
the likeliest); absent: a **generation** item (the stage writes an answer; ``answers``, when given, are the
references it is judged against). A raw dataset row (the JSONL formats below) is accepted wherever an item is,
and turned into an item by the prompts below, so a client may also send the dataset's own rows.

What a request asks beyond the prompt travels in the item too (the OpenAI front end writes these fields):
``messages`` (a chat: ``[{"role", "content"}]``, which a stage puts through its chat template; ``prompt`` then
holds the same conversation as labelled lines, for a stage that reads text only), ``prompt_ids`` (the prompt as
token ids, read in the first stage's vocabulary; ``prompt`` may then be left out), ``echo`` (the prompt's own
token log-probabilities, then ``max_new_tokens`` generated tokens after it), ``max_new_tokens``, ``stop`` (stop
strings that replace the stage's own), ``usage`` (a scoring answer reports its token counts), and the decoding
of :class:`~cascadeserve.models.llm_sampling.Sampling` (``temperature``, ``top_p``, ``seed``,
``frequency_penalty``, ``presence_penalty``, ``ignore_eos``). A field out of range is a ``ValueError`` naming it.

The JSONL formats of ``../shared/data/datasets/llm/`` and the prompt each gets (the options are continuations,
each with a leading space, scored by their length-normalised log-likelihood, lm-eval's "cloze" form):

* **multiple choice** (ARC-Easy, ARC-Challenge, MMLU): ``question``, ``choices``, ``labels`` (A, B, ...),
  ``answer`` (a label). Prompt ``"Question: {question}\\nAnswer:"``, options ``" {choice}"``, label = the
  answer's index. MMLU rows with a ``subject`` get a first line
  ``"The following is a question about {subject, underscores as spaces}."``.
* **BoolQ**: ``question``, ``passage``, ``answer`` (true/false). Prompt
  ``"{passage}\\nQuestion: {question}?\\nAnswer:"``, options ``" no"``, ``" yes"``, label 1 for true.
* **SST-2**: ``sentence``, ``label`` (0 negative, 1 positive). Prompt
  ``"Review: {sentence}\\nSentiment:"``, options ``" negative"``, ``" positive"``, label = ``label``.
* **NQ-open** (generation): ``question``, ``answers`` (any one counts). Prompt
  ``"Answer the question with a few words.\\nQuestion: {question}?\\nAnswer:"``; the answer is judged right when,
  after :func:`normalise_answer` (lower case, no punctuation, no articles a/an/the, single spaces), it equals one
  of the normalised references. Generation stops at a new line (``GENERATION_STOP``).

Every row may carry an ``id`` (used as the sample id; else the row's index). A malformed row is a one-line
:class:`~cascadeserve.models.dataset.ValidationDataError` naming the file and line.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.dataset import ValidationDataError, ValidationSet
from cascadeserve.models.llm_sampling import GREEDY, Sampling, parse_sampling, parse_stop

__all__ = [
    "GENERATION_STOP",
    "ROLES",
    "LLMItem",
    "conversation",
    "decode_batch",
    "decode_item",
    "encode_item",
    "is_correct",
    "load_jsonl",
    "normalise_answer",
    "row_to_item",
]

# where a short free-text answer ends (lm-eval's NQ-open task stops at a new line too)
GENERATION_STOP: tuple[str, ...] = ("\n",)
ROLES = ("system", "user", "assistant", "developer")  # a chat message's roles ("developer" is OpenAI's "system")

TASK_SCORING = "llm-scoring"
TASK_GENERATION = "llm-generation"


@dataclass(frozen=True)
class LLMItem:
    """One question for an LLM stage: a prompt, and either options (scoring) or reference answers (generation)."""

    prompt: str
    options: tuple[str, ...] | None = None
    answers: tuple[str, ...] = ()
    label: int | None = None  # the right option's index (scoring), when known
    # what a request asks beyond the prompt (the module docstring)
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) per chat message
    prompt_ids: tuple[int, ...] | None = None
    echo: bool = False
    max_new_tokens: int | None = None
    stop: tuple[str, ...] | None = None  # None: the stage's own stop strings
    sampling: Sampling = GREEDY
    usage: bool = False

    @property
    def scoring(self) -> bool:
        return self.options is not None

    @property
    def first_stage_only(self) -> bool:
        """Only the stage that reads it first can answer: an echo measures that model, and token ids are in its
        vocabulary (a later stage's vocabulary is another)."""
        return self.echo or self.prompt_ids is not None


def encode_item(item: LLMItem) -> str:
    """The item as one JSON string (what a V2 ``BYTES`` row carries)."""
    doc: dict[str, Any] = {"prompt": item.prompt}
    if item.options is not None:
        doc["options"] = list(item.options)
    if item.answers:
        doc["answers"] = list(item.answers)
    return json.dumps(doc, ensure_ascii=False)


def decode_batch(model: str, batch: Any) -> list[LLMItem]:
    """A batch's rows as items (every LLM stage, local or upstream, reads its batch so); a malformed row is a
    ``ValueError`` naming the model and the row's index."""
    out: list[LLMItem] = []
    for i, raw in enumerate(batch):
        try:
            out.append(decode_item(raw))
        except ValueError as e:
            raise ValueError(f"model {model!r}: row {i}: {e}") from None
    return out


def decode_item(raw: Any) -> LLMItem:
    """An item from a JSON string or bytes, a mapping (an item or a raw dataset row), or an :class:`LLMItem`."""
    if isinstance(raw, LLMItem):
        return raw
    if isinstance(raw, bytes | bytearray | np.bytes_):
        raw = bytes(raw).decode("utf-8")
    if isinstance(raw, str | np.str_):
        try:
            raw = json.loads(str(raw))
        except ValueError as e:
            raise ValueError(f"an LLM item must be a JSON object with 'prompt' (and 'options'): {e}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"an LLM item must be a JSON object, got {type(raw).__name__}")
    if "prompt" not in raw and "prompt_ids" not in raw:
        return row_to_item(raw)
    ids = _prompt_ids(raw.get("prompt_ids"))
    prompt = raw.get("prompt", "" if ids is not None else None)
    options = raw.get("options")
    answers = raw.get("answers", ())
    if not isinstance(prompt, str) or (not prompt and ids is None):
        raise ValueError("'prompt' must be a non-empty string")
    if options is not None and (
        not isinstance(options, list) or len(options) < 2 or not all(isinstance(o, str) and o for o in options)
    ):
        raise ValueError("'options' must be a list of at least 2 non-empty strings")
    if not isinstance(answers, list | tuple) or not all(isinstance(a, str) for a in answers):
        raise ValueError("'answers' must be a list of strings")
    if options is not None and ids is not None:
        raise ValueError("'options' are scored after a text prompt, not after 'prompt_ids'")
    cap = raw.get("max_new_tokens")
    echo = raw.get("echo", False)
    if not isinstance(echo, bool):
        raise ValueError("'echo' must be true or false")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < (0 if echo else 1)):
        raise ValueError(f"'max_new_tokens' must be an integer of at least {0 if echo else 1}, got {cap!r}")
    sampling, stop = parse_sampling(raw), parse_stop(raw.get("stop"))  # a SamplingError names the field
    return LLMItem(
        prompt,
        None if options is None else tuple(options),
        tuple(answers),
        messages=_messages(raw.get("messages")),
        prompt_ids=ids,
        echo=echo,
        max_new_tokens=cap,
        stop=stop,
        sampling=sampling,
        usage=raw.get("usage") is True,
    )


def _prompt_ids(raw: Any) -> tuple[int, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        raise ValueError("'prompt_ids' must be a non-empty list of token ids")
    if min(raw) < 0:
        raise ValueError("'prompt_ids' must hold non-negative token ids")
    return tuple(raw)


def _messages(raw: Any) -> tuple[tuple[str, str], ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        raise ValueError("'messages' must be a non-empty list of {role, content}")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"'messages[{i}]' must be an object with a role ({', '.join(ROLES)}) and text content")
        out.append((str(m["role"]), str(m["content"])))
    return tuple(out)


def conversation(messages: tuple[tuple[str, str], ...]) -> str:
    """A chat as plain text, for a model without a chat template: each message on its own line after its role
    (``User: ...``), then ``Assistant:`` for the answer to follow."""
    lines = [f"{'System' if r == 'developer' else r.capitalize()}: {c}" for r, c in messages]
    return "\n".join([*lines, "Assistant:"])


def _text(row: dict[str, Any], key: str) -> str:
    v = row.get(key)
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"field {key!r} must be a non-empty string")
    return v.strip()


def row_to_item(row: dict[str, Any]) -> LLMItem:
    """A raw dataset row (any format above) as an item with its label; ``ValueError`` names the bad field."""
    if "choices" in row:
        question = _text(row, "question")
        choices, labels, answer = row.get("choices"), row.get("labels"), row.get("answer")
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            raise ValueError("field 'choices' must be a list of at least 2 strings")
        if not isinstance(labels, list) or len(labels) != len(choices):
            raise ValueError(f"field 'labels' must be a list of {len(choices)} labels, one per choice")
        if answer not in labels:
            raise ValueError(f"field 'answer' must be one of the labels {labels}, got {answer!r}")
        head = ""
        if isinstance(row.get("subject"), str):
            head = f"The following is a question about {row['subject'].replace('_', ' ')}.\n"
        return LLMItem(
            f"{head}Question: {question}\nAnswer:",
            tuple(f" {c.strip()}" for c in choices),
            label=labels.index(answer),
        )
    if "passage" in row:
        question, passage = _text(row, "question"), _text(row, "passage")
        answer = row.get("answer")
        if not isinstance(answer, bool):
            raise ValueError(f"field 'answer' must be true or false, got {answer!r}")
        return LLMItem(f"{passage}\nQuestion: {question}?\nAnswer:", (" no", " yes"), label=int(answer))
    if "sentence" in row:
        sentence = _text(row, "sentence")
        label = row.get("label")
        if label not in (0, 1) or isinstance(label, bool):
            raise ValueError(f"field 'label' must be 0 or 1, got {label!r}")
        return LLMItem(f"Review: {sentence}\nSentiment:", (" negative", " positive"), label=int(label))
    if "answers" in row:
        question = _text(row, "question")
        answers = row.get("answers")
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise ValueError("field 'answers' must be a non-empty list of strings")
        return LLMItem(f"Answer the question with a few words.\nQuestion: {question}?\nAnswer:", None, tuple(answers))
    raise ValueError(
        "unknown row format: expected multiple choice (question, choices, labels, answer), BoolQ (question, "
        "passage, answer), SST-2 (sentence, label), NQ-open (question, answers), or an item (prompt, options)"
    )


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalise_answer(text: str) -> str:
    """SQuAD/NQ normalisation: lower case, punctuation and the articles a/an/the removed, spaces collapsed."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def is_correct(text: str, answers: tuple[str, ...] | list[str]) -> bool:
    """Normalised exact match against any reference answer."""
    got = normalise_answer(text)
    return bool(got) and any(got == normalise_answer(a) for a in answers)


def load_jsonl(path: str | Path, *, limit: int | None = None) -> ValidationSet:
    """Read a labelled LLM set: inputs are encoded items (one JSON string each), labels the right option's index
    (scoring) or 1 (generation: the profile records 1 for a right answer, 0 for a wrong one). All rows must be of
    one task. Errors name the file and line."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValidationDataError(f"{p}: cannot read as UTF-8 JSON Lines: {e}") from None
    inputs: list[str] = []
    labels: list[int] = []
    ids: list[str] = []
    where: list[int] = []
    task: str | None = None
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if limit is not None and len(inputs) >= limit:
            break
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError(f"expected a JSON object, got {type(row).__name__}")
            item = decode_item(row)
        except ValueError as e:
            raise ValidationDataError(f"{p}, line {number}: {e}") from None
        kind = TASK_SCORING if item.scoring else TASK_GENERATION
        if task is None:
            task = kind
        elif kind != task:
            raise ValidationDataError(f"{p}, line {number}: a {kind} row in a {task} file; use one task per file")
        if item.scoring and item.label is None:
            raise ValidationDataError(f"{p}, line {number}: a scoring row needs its answer (a dataset row)")
        if not item.scoring and not item.answers:
            raise ValidationDataError(f"{p}, line {number}: a generation row needs reference 'answers'")
        sid = str(row.get("id", len(inputs)))
        if sid in seen:
            raise ValidationDataError(f"{p}, line {number}: duplicate id {sid!r} (first on line {seen[sid]})")
        seen[sid] = number
        inputs.append(encode_item(item))
        labels.append(item.label if item.scoring and item.label is not None else 1)
        ids.append(sid)
        where.append(number)
    if not inputs:
        raise ValidationDataError(f"{p}: no data rows")
    as_int = [int(s) if s.isdigit() and str(int(s)) == s else None for s in ids]
    sample_ids = (
        np.asarray(as_int, dtype=np.int64) if all(v is not None for v in as_int) else np.asarray(ids, dtype=object)
    )
    return ValidationSet(
        inputs, np.asarray(labels, dtype=np.int64), sample_ids, str(p), tuple(where), task=task or TASK_SCORING
    )
