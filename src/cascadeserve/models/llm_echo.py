"""OpenAI's ``echo`` on a local LLM: a prompt's own token log-probabilities, then what the model writes after it.

:func:`prompt_logprobs` gives each prompt's tokens with their log-probabilities given the tokens before them, in one
forward pass over the batch: the raw text (no chat template), the first token without one (``None``) unless the
tokenizer adds a BOS token to condition it on (special tokens are not reported); a prompt given as token ids
(``prompt_ids``) is read as it is, every token reported. This is how a client scores an option as a continuation
(an upstream stage of another cascadeserve; lm-eval's ``loglikelihood``).

:func:`echo` answers echo items: the prompt's log-probabilities followed by the item's ``max_new_tokens`` generated
tokens (0: none), generated from the same tokens with the item's stop strings and decoding; the text is the prompt
followed by the continuation, and ``finish_reason`` is ``length`` when the cap cut it. lm-eval's
``local-completions`` sends ``echo: true, max_tokens: 1, logprobs: 1`` and reads the prompt's part.
"""

from __future__ import annotations

from collections.abc import Sequence

from cascadeserve.models.base import TextOutput, TokenLogprobs
from cascadeserve.models.llm import TOP_LOGPROBS, LocalLLM
from cascadeserve.models.llm_prompts import LLMItem

__all__ = ["echo", "prompt_logprobs"]


def _rows(llm: LocalLLM, items: Sequence[LLMItem]) -> tuple[list[list[int]], list[list[tuple[int, int]]], list[str]]:
    """Each prompt's token ids; per prompt, (position, character offset) of each token reported; the texts."""
    rows: list[list[int]] = []
    kept: list[list[tuple[int, int]]] = []
    texts: list[str] = []
    for it in items:
        if it.prompt_ids is not None:
            ids = llm.encode(it, it.max_new_tokens or 0)
            pieces = [llm.tokenizer.decode([i]) for i in ids]
            starts = [sum(len(p) for p in pieces[:i]) for i in range(len(pieces))]
            rows.append(ids)
            kept.append(list(enumerate(starts)))
            texts.append("".join(pieces))
            continue
        enc = llm.tokenizer(
            it.prompt, add_special_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True
        )
        ids = list(enc["input_ids"])
        llm.check_context(len(ids), it.max_new_tokens or 0, it)
        special = list(enc["special_tokens_mask"])
        offsets = list(enc["offset_mapping"])
        rows.append(ids)
        kept.append([(i, int(offsets[i][0])) for i in range(len(ids)) if not special[i]])
        texts.append(it.prompt)
    return rows, kept, texts


def _logprobs(llm: LocalLLM, rows: list[list[int]], kept: list[list[tuple[int, int]]]) -> list[TokenLogprobs]:
    torch = llm.torch
    ids_t, mask, pos = llm.pad_batch(rows)
    with torch.inference_mode():
        logits = llm.model(input_ids=ids_t, attention_mask=mask, position_ids=pos, use_cache=False).logits
        logp = torch.log_softmax(logits.float(), dim=-1)
    width = ids_t.shape[1]
    out: list[TokenLogprobs] = []
    for r, row in enumerate(rows):
        pad = width - len(row)
        toks: list[str] = []
        lps: list[float | None] = []
        offs: list[int] = []
        tops: list[tuple[tuple[str, float], ...]] = []
        for i, off in kept[r]:
            toks.append(llm.tokenizer.decode([row[i]]))
            offs.append(off)
            if i == 0:
                lps.append(None)
                tops.append(())
                continue
            dist = logp[r, pad + i - 1]
            lps.append(float(dist[row[i]]))
            best = dist.topk(TOP_LOGPROBS)
            tops.append(llm.top_tokens(best.indices.tolist(), best.values.tolist()))
        out.append(TokenLogprobs(tuple(toks), tuple(lps), tuple(tops), tuple(offs)))
    return out


def prompt_logprobs(llm: LocalLLM, prompts: Sequence[str | LLMItem]) -> list[TokenLogprobs]:
    """Each prompt's own token log-probabilities (module docstring)."""
    if not prompts:
        return []
    items = [p if isinstance(p, LLMItem) else LLMItem(p) for p in prompts]
    rows, kept, _ = _rows(llm, items)
    return _logprobs(llm, rows, kept)


def echo(llm: LocalLLM, items: Sequence[LLMItem], stop: Sequence[str] = ()) -> list[TextOutput]:
    """Echo items answered (module docstring); ``stop``: the stage's stop strings, for items that give none."""
    if not items:
        return []
    rows, kept, texts = _rows(llm, items)
    lps = _logprobs(llm, rows, kept)
    todo = [i for i, it in enumerate(items) if it.max_new_tokens]
    gens = llm.generate_ids(
        [rows[i] for i in todo],
        [int(items[i].max_new_tokens or 0) for i in todo],
        [items[i].stop or tuple(stop) for i in todo],
        [items[i].sampling for i in todo],
        strip=False,
    )
    after = dict(zip(todo, gens, strict=True))
    out: list[TextOutput] = []
    for i, (lp, text) in enumerate(zip(lps, texts, strict=True)):
        g = after.get(i)
        if g is None:
            out.append(TextOutput(text, len(rows[i]), 0, lp, "length"))
            continue
        at = len(text)
        offsets = []
        for piece in g.tokens:
            offsets.append(at)
            at += len(piece)
        both = TokenLogprobs(
            lp.tokens + g.tokens, lp.logprobs + g.token_logprobs, lp.top + g.top, lp.offsets + tuple(offsets)
        )
        out.append(TextOutput(text + g.text, len(rows[i]), g.output_tokens, both, g.finish_reason))
    return out
