"""How an LLM stage decodes one request: its sampling parameters, and the per-row control of a batch's decoding.

A request may ask for its own decoding (the OpenAI front end passes the client's parameters in the item, see
:mod:`cascadeserve.models.llm_prompts`); a batch holds requests that asked for different things, so every row is
decoded by its own rules in the same ``generate`` call:

* :class:`Sampling` — ``temperature`` (0, the default: greedy; above 0: sampling from the softmax of the logits
  divided by it), ``top_p`` (nucleus: the smallest set of likeliest tokens whose probability reaches it),
  ``seed`` (a generator of the row's own, so a seeded request draws the same tokens whatever else runs),
  ``frequency_penalty`` and ``presence_penalty`` (OpenAI's: each token's logit is lowered by the frequency penalty
  times the times it occurs in the answer so far, plus the presence penalty once it occurs at all), and
  ``ignore_eos`` (the end tokens are never chosen: the answer runs to its cap or a stop string).
  :func:`parse_sampling` reads them from an item and refuses a value out of range with :class:`SamplingError`
  naming the field.
* :class:`RowControl` — a ``transformers`` logits processor over a left-padded batch: for each row it applies the
  penalties, masks the end tokens of an ``ignore_eos`` row, draws a sampling row's token with its generator (the
  other tokens set to -inf, so the greedy pick that follows takes it), and forces an end token once the row has
  its own cap of tokens or has written one of its own stop strings, so a row finishes without waiting for the
  batch's longest cap. The processor never changes the logits ``generate`` reports (``output_logits``): a token's
  log-probability is the model's own, before temperature, nucleus or penalties, which is what certainty is
  computed from (:mod:`cascadeserve.profile.llm_certainty`) whichever way the token was chosen.
* :func:`read_answer` — a row's text and finish reason from the tokens it decoded: ``stop`` at an end token or a
  stop string (the text cut before it), ``length`` at the row's cap.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GREEDY", "MAX_STOP", "RowControl", "Sampling", "SamplingError", "parse_sampling", "parse_stop", "read_answer",
]  # fmt: skip

MAX_STOP = 16  # stop strings one request may give (OpenAI allows 4; vLLM any number)
MAX_STOP_CHARS = 200  # characters of one stop string


class SamplingError(ValueError):
    """A decoding parameter out of range; ``field`` is the item's (and OpenAI's) name for it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Sampling:
    """One request's decoding (module docstring); the defaults are greedy decoding as the profile measured it."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalised(self) -> bool:
        return self.frequency_penalty != 0.0 or self.presence_penalty != 0.0

    @property
    def plain(self) -> bool:
        """Greedy, no penalties, the end tokens allowed: nothing for :class:`RowControl` to do but caps and stops."""
        return self.greedy and not self.penalised and not self.ignore_eos

    def to_json(self) -> dict[str, Any]:
        """The fields that differ from the defaults (what an item carries)."""
        out: dict[str, Any] = {}
        for name, default in (
            ("temperature", 0.0),
            ("top_p", 1.0),
            ("seed", None),
            ("frequency_penalty", 0.0),
            ("presence_penalty", 0.0),
            ("ignore_eos", False),
        ):
            value = getattr(self, name)
            if value != default:
                out[name] = value
        return out


GREEDY = Sampling()  # what an item asks for when it asks nothing: greedy decoding, as the profile measured


def _number(
    doc: Mapping[str, Any], field: str, default: float, low: float, high: float, *, open_low: bool = False
) -> float:
    v = doc.get(field)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SamplingError(field, f"expected a number, got {v!r}")
    if v < low or v > high or (open_low and v == low):
        lo = f"above {low:g}" if open_low else f"from {low:g}"
        raise SamplingError(field, f"expected a number {lo} to {high:g}, got {v!r}")
    return float(v)


def parse_sampling(doc: Mapping[str, Any]) -> Sampling:
    """The decoding an item (or an OpenAI request) asks for; a missing or null field takes its default."""
    seed = doc.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**64):
        raise SamplingError("seed", f"expected an integer, got {seed!r}")
    ignore = doc.get("ignore_eos")
    if ignore is not None and not isinstance(ignore, bool):
        raise SamplingError("ignore_eos", f"expected true or false, got {ignore!r}")
    return Sampling(
        temperature=_number(doc, "temperature", 0.0, 0.0, 2.0),
        top_p=_number(doc, "top_p", 1.0, 0.0, 1.0, open_low=True),
        seed=seed,
        frequency_penalty=_number(doc, "frequency_penalty", 0.0, -2.0, 2.0),
        presence_penalty=_number(doc, "presence_penalty", 0.0, -2.0, 2.0),
        ignore_eos=bool(ignore),
    )


def parse_stop(value: Any) -> tuple[str, ...] | None:
    """A request's stop strings (OpenAI's ``stop``: one string or a list), or None where it gives none."""
    if value is None or value == "" or value == []:
        return None
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise SamplingError("stop", "expected a non-empty string or a list of non-empty strings")
    if len(stops) > MAX_STOP or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise SamplingError("stop", f"at most {MAX_STOP} strings of at most {MAX_STOP_CHARS} characters each")
    return tuple(stops)


class RowControl:
    """Per-row decoding for one ``generate`` call over a left-padded batch (module docstring).

    ``width``: the padded prompt length (where every row's answer starts); ``caps``: each row's most new tokens;
    ``stops``: each row's stop strings; ``end_ids``: the end tokens (an ``ignore_eos`` row never picks one);
    ``force_id``: the end token that finishes a row at its cap or stop string."""

    def __init__(
        self,
        torch: Any,
        tokenizer: Any,
        *,
        width: int,
        sampling: Sequence[Sampling],
        caps: Sequence[int],
        stops: Sequence[Sequence[str]],
        end_ids: Sequence[int],
        force_id: int,
        device: str,
    ) -> None:
        self.torch, self.tokenizer, self.width = torch, tokenizer, width
        self.sampling, self.caps, self.stops = list(sampling), list(caps), [tuple(s) for s in stops]
        self.end_ids, self.force_id = list(end_ids), force_id
        self.generators: list[Any] = []
        for s in self.sampling:
            g = None
            if not s.greedy:
                g = torch.Generator(device=device)
                g.manual_seed(s.seed % 2**64 if s.seed is not None else secrets.randbits(63))
            self.generators.append(g)
        self._max_cap = max(caps, default=0)

    def needed(self) -> bool:
        """Whether any row needs more than the batch's own greedy decoding and its longest cap."""
        return any(not s.plain for s in self.sampling) or any(self.stops) or any(c < self._max_cap for c in self.caps)

    def _done(self, b: int, answer: Any, step: int) -> bool:
        if step >= self.caps[b]:
            return True
        if not self.stops[b] or step == 0:
            return False
        text = self.tokenizer.decode(answer.tolist(), skip_special_tokens=True)
        return any(s in text for s in self.stops[b])

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        torch = self.torch
        step = int(input_ids.shape[1]) - self.width
        out = scores.clone()  # never in place: generate reports the same tensor as the raw logits
        for b, s in enumerate(self.sampling):
            answer = input_ids[b, self.width :]
            if self._done(b, answer, step):
                out[b] = -math.inf
                out[b, self.force_id] = 0.0
                continue
            row = out[b]
            if s.penalised and step > 0:
                counts = torch.bincount(answer, minlength=row.shape[0])[: row.shape[0]].to(row.dtype)
                row -= s.frequency_penalty * counts + s.presence_penalty * (counts > 0).to(row.dtype)
            if s.ignore_eos:
                row[self.end_ids] = -math.inf
            if s.greedy:
                continue
            probs = torch.softmax(row / s.temperature, dim=-1)
            if s.top_p < 1.0:
                ranked, order = probs.sort(descending=True)
                keep = (ranked.cumsum(-1) - ranked) < s.top_p  # the first always stays
                probs = torch.zeros_like(probs).scatter_(-1, order[keep], ranked[keep])
            tok = int(torch.multinomial(probs, 1, generator=self.generators[b]))
            row.fill_(-math.inf)
            row[tok] = 0.0
        return out


def read_answer(
    tokenizer: Any, tokens: Sequence[int], ends: set[int], stops: Sequence[str]
) -> tuple[list[int], str, str]:
    """A row's answer from the tokens it decoded (up to its cap): ``(tokens, text, finish_reason)``. It ends at an
    end token (counted: it cost a step; not in the text) or where the text first holds a stop string (cut there),
    with ``stop``; else at the cap, with ``length``."""
    toks: list[int] = []
    text = ""
    for tok in tokens:
        toks.append(int(tok))
        if tok in ends:
            return toks, text, "stop"
        text = tokenizer.decode(toks, skip_special_tokens=True)
        cut = min((text.find(s) for s in stops if s in text), default=-1)
        if cut >= 0:
            return toks, text[:cut], "stop"
    return toks, text, "length"
