"""A local causal language model as a cascade stage: scoring options and generating answers.

:class:`LocalLLM` wraps a Hugging Face ``transformers`` causal LM read from a *local* directory or a single GGUF
file (``from_pretrained(dir, gguf_file=name)``: the ``gguf`` package dequantises the weights to float32 at load
time; ``accelerate`` must be installed). Nothing is ever fetched from a hub (``HF_HUB_OFFLINE=1`` and
``local_files_only``). It runs on the CPU, or on CUDA when ``device="cuda"`` and a GPU is present (else it
falls back to the CPU and says so in :attr:`LocalLLM.device_used`).

Two calls, each over a batch of prompts, left-padded so that every prompt ends at the same position:

* :meth:`LocalLLM.score` — for each prompt, the length-normalised log-likelihood of each option as its
  continuation (lm-eval's "cloze" form: the mean log-probability per option token). All prompt+option pairs of
  the batch go through **one** forward pass; the language-model head runs only on the last positions
  (``logits_to_keep``), which matters with Gemma's 262k-token vocabulary. Explicit position ids from the
  attention mask make a padded row score exactly as it would alone.
* :meth:`LocalLLM.generate` — greedy decoding by default, with the KV cache, stopping at an end token, a stop
  string or the ``max_new_tokens`` cap (each row's own, see below); each prompt gets a :class:`Generation` with
  the per-token log-probabilities and the first token's margin, from which
  :mod:`cascadeserve.profile.llm_certainty` computes certainty.

A plain prompt is wrapped in the tokenizer's chat template (one user turn, then the assistant's turn) when the
tokenizer has one and ``chat=True``; a chat always is, and a model without a template (Gemma 3 270M's GGUF here)
reads it as labelled lines (:func:`~cascadeserve.models.llm_prompts.conversation`).

Reading a GGUF with ``transformers`` is slow (30-240 s on 2 cores: the vocabulary is parsed field by field and
the weights dequantised in numpy), so the first load saves the converted model and tokenizer (float32
safetensors) under the user cache directory (:func:`default_cache`), keyed by the file's path, size and time, and
later loads read that copy in a few seconds; ``cache=None`` turns this off.

Generations carry each step's token text and its :data:`TOP_LOGPROBS` likeliest alternatives, which the OpenAI
front end returns as ``logprobs``; :mod:`cascadeserve.models.llm_echo` gives a prompt's own (OpenAI's ``echo``).

Each row of a batch may ask for its own decoding: a cap of its own (``max_new_tokens``, up to the context),
stop strings, sampling and penalties (:mod:`cascadeserve.models.llm_sampling`); a chat (an item with ``messages``)
goes through the chat template whatever ``chat`` says. The context is ``max_length`` (2048 by default, never
past the model's own): a prompt that does not fit, with the tokens it asks for, is a
:class:`~cascadeserve.errors.RequestError` in vLLM's words, never cut short.

:meth:`LocalLLM.time_costs` measures the cost model that the profiler records: prefill ms per prompt token and
decode ms per step, for a batch size.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.errors import RequestError
from cascadeserve.models.base import ModelLoadError, require
from cascadeserve.models.llm_prompts import LLMItem, conversation
from cascadeserve.models.llm_sampling import RowControl, Sampling, read_answer

__all__ = ["TOP_LOGPROBS", "Generation", "LocalLLM", "default_cache"]

TOP_LOGPROBS = 5  # alternatives kept per token (OpenAI's completions API allows at most 5 too)

# end-of-turn markers of common chat formats; any that the vocabulary has also ends a generation
_END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", "</s>")


@dataclass(frozen=True)
class Generation:
    """One generated answer. ``token_logprobs`` has one entry per decode step, the stop token included (it cost a
    step); ``text`` excludes the stop token or string. ``first_token_margin``: top-1 minus top-2 probability of
    the first step. ``prompt_tokens``: the prompt's tokens after the chat template, padding excluded."""

    text: str
    token_logprobs: tuple[float, ...]
    first_token_margin: float
    prompt_tokens: int
    output_tokens: int
    tokens: tuple[str, ...] = ()  # each step's token as text
    top: tuple[tuple[tuple[str, float], ...], ...] = ()  # each step's TOP_LOGPROBS likeliest tokens, best first
    finish_reason: str = "stop"  # "length" when the cap cut the answer, else "stop" (an end token or stop string)


def default_cache() -> Path:
    """Where converted GGUF models are kept: ``<user cache>/cascadeserve/llm``."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("cascadeserve")) / "llm"


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _content_key(path: Path) -> str:
    """The cache key of a GGUF file's converted copy: its size and the hash of its first and last MiB, so that every
    install of the same file (another virtual environment, a fresh clone) shares one copy, and a changed file gets
    a new one. (Hashing the whole file would cost a second per load; a path and mtime key made a 0.5 GB copy per
    environment.)"""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


class LocalLLM:
    """A causal LM from a local directory or GGUF file; see the module docstring."""

    def __init__(
        self,
        name: str,
        path: str | Path,
        *,
        device: str = "cpu",
        threads: int | None = None,
        dtype: str = "float32",
        max_new_tokens: int = 32,
        chat: bool = True,
        system_prompt: str | None = None,
        max_length: int = 2048,
        cache: str | Path | None = "default",
    ) -> None:
        if max_new_tokens < 1:
            raise ModelLoadError(f"model {name!r}: max_new_tokens must be >= 1, got {max_new_tokens}")
        self.name = name
        self.path = Path(path)
        self.device = device
        self.threads = threads
        self.dtype = dtype
        self.max_new_tokens = max_new_tokens
        self.chat = chat
        self.system_prompt = system_prompt
        self.max_length = max_length
        self.cache = None if cache is None else (default_cache() if cache == "default" else Path(cache))
        self.model: Any = None
        self.tokenizer: Any = None
        self.device_used = "cpu"
        self._torch: Any = None
        self._stop_ids: list[int] = []

    # -- loading ---------------------------------------------------------------------------------------------
    def load(self) -> None:
        if self.model is not None:
            return
        _offline()
        torch = require("torch", model=self.name)
        transformers = require("transformers", model=self.name)
        self._torch = torch
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        folder, kw = self._source()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, **kw)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device_used = self.device if self.device == "cpu" or torch.cuda.is_available() else "cpu"
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, dtype=getattr(torch, self.dtype), **kw
        )
        self.model = model.to(self.device_used).eval()
        cfg = getattr(self.model.config, "text_config", None) or self.model.config
        own = getattr(cfg, "max_position_embeddings", None)
        if isinstance(own, int) and own > 0:  # the served context: max_length, never past the model's own
            self.max_length = min(self.max_length, own)
        ids = {self.tokenizer.eos_token_id}
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(eos if isinstance(eos, list) else [eos])
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in _END_TOKENS if t in vocab)
        self._stop_ids = sorted(i for i in ids if isinstance(i, int))

    def _source(self) -> tuple[str, dict[str, str]]:
        """Where ``from_pretrained`` reads: the directory, or the GGUF's converted copy in the cache (made here the
        first time: converting a GGUF takes 30-90 s on 2 cores, reading the copy a few seconds)."""
        if self.path.is_dir():
            return str(self.path), {}
        if not self.path.is_file():
            raise ModelLoadError(
                f"model {self.name!r}: {self.path} is neither a local model directory nor a .gguf file "
                "(cascadeserve never downloads models at run time)"
            )
        if self.path.suffix != ".gguf":
            raise ModelLoadError(f"model {self.name!r}: {self.path} is a file but not a .gguf")
        require("gguf", model=self.name)
        gguf = (str(self.path.parent), {"gguf_file": self.path.name})
        if self.cache is None:
            return gguf
        converted = self.cache / f"{self.path.stem}-{_content_key(self.path)}"
        if (converted / "config.json").is_file():
            return str(converted), {}
        transformers = require("transformers", model=self.name)
        torch = self._torch
        tok = transformers.AutoTokenizer.from_pretrained(gguf[0], local_files_only=True, **gguf[1])
        model = transformers.AutoModelForCausalLM.from_pretrained(
            gguf[0], local_files_only=True, dtype=torch.float32, **gguf[1]
        )
        # the weights are dequantised float32 already; the GGUF "quantizer" only refuses to save them
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = converted.with_name(converted.name + f".tmp{os.getpid()}")
        try:  # the cache is a convenience: a read-only home must not stop the model from loading
            tok.save_pretrained(str(tmp))
            model.save_pretrained(str(tmp))
            tmp.replace(converted)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            return gguf
        return str(converted), {}

    # -- prompts ---------------------------------------------------------------------------------------------
    @property
    def torch(self) -> Any:
        """The ``torch`` module (once loaded)."""
        self.load()
        return self._torch

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def format(self, prompt: str | LLMItem) -> str:
        """The text the model sees. A chat (an item with ``messages``) goes through the chat template when the
        tokenizer has one, else it is the labelled conversation of :func:`conversation`; a plain prompt goes
        through the template (one user turn) only with ``chat=True``."""
        self.load()
        if isinstance(prompt, LLMItem) and prompt.messages is not None:
            if not self.has_chat_template:
                return conversation(prompt.messages)
            messages = [{"role": "system" if r == "developer" else r, "content": c} for r, c in prompt.messages]
            if self.system_prompt is not None and messages[0]["role"] != "system":
                messages.insert(0, {"role": "system", "content": self.system_prompt})
            return str(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        text = prompt.prompt if isinstance(prompt, LLMItem) else prompt
        if not (self.chat and self.has_chat_template):
            return text
        messages = [{"role": "user", "content": text}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return str(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))

    def templated(self, prompt: str | LLMItem) -> bool:
        """Whether the prompt goes through the chat template (which holds its own special tokens)."""
        chat = isinstance(prompt, LLMItem) and prompt.messages is not None
        return self.has_chat_template and (chat or self.chat)

    def encode(self, prompt: str | LLMItem, extra: int = 0) -> list[int]:
        """Token ids of the formatted prompt (a template already holds its special tokens; else BOS is added), or
        an item's own ``prompt_ids``. A prompt that leaves fewer than ``extra`` tokens of the context (and at least
        one) is a :class:`~cascadeserve.errors.RequestError` in vLLM's words: never cut short in silence."""
        self.load()
        if isinstance(prompt, LLMItem) and prompt.prompt_ids is not None:
            ids = list(prompt.prompt_ids)
            vocab = int(self.model.get_input_embeddings().weight.shape[0])
            if max(ids) >= vocab:
                raise RequestError(
                    f"prompt: token id {max(ids)} is past the vocabulary ({vocab} tokens)", param="prompt"
                )
        else:
            ids = list(self.tokenizer(self.format(prompt), add_special_tokens=not self.templated(prompt))["input_ids"])
        self.check_context(len(ids), extra, prompt)
        return ids

    def check_context(self, prompt_tokens: int, asked: int, prompt: str | LLMItem = "") -> None:
        """Refuse a prompt of ``prompt_tokens`` that, with ``asked`` new tokens, does not fit the context."""
        n = self.max_length
        if prompt_tokens + asked <= n:
            return
        chat = isinstance(prompt, LLMItem) and prompt.messages is not None
        if asked:
            message = (
                f"This model's maximum context length is {n} tokens. However, you requested {prompt_tokens + asked} "
                f"tokens ({prompt_tokens} in the messages, {asked} in the completion). Please reduce the length of "
                "the messages or completion."
            )
        else:
            message = (
                f"This model's maximum context length is {n} tokens. However, you requested {prompt_tokens} tokens "
                "in the messages, Please reduce the length of the messages."
            )
        raise RequestError(message, param="messages" if chat else "prompt", code="context_length_exceeded")

    def _continuation(self, option: str) -> list[int]:
        return list(self.tokenizer(option, add_special_tokens=False)["input_ids"])

    def pad_batch(self, rows: Sequence[Sequence[int]]) -> tuple[Any, Any, Any]:
        """Left-padded ``input_ids``, ``attention_mask`` and ``position_ids`` (0 at each row's first real token)."""
        torch = self._torch
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), int(self.tokenizer.pad_token_id), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            if r:
                ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
                mask[i, width - len(r) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        dev = self.device_used
        return ids.to(dev), mask.to(dev), pos.to(dev)

    # -- scoring ---------------------------------------------------------------------------------------------
    def score(
        self, prompts: Sequence[str], options: Sequence[Sequence[str]], *, normalise: bool = True
    ) -> list[np.ndarray]:
        """Per prompt, each option's log-likelihood as its continuation: the mean over the option's tokens
        (``normalise``) or the sum. One forward pass over every prompt+option pair."""
        self.load()
        if len(prompts) != len(options):
            raise ValueError(f"{len(prompts)} prompts but {len(options)} option lists")
        rows: list[list[int]] = []
        conts: list[int] = []
        for prompt, opts in zip(prompts, options, strict=True):
            ctx = self.encode(prompt)
            for o in opts:
                c = self._continuation(o)
                if not c:
                    raise ValueError(f"option {o!r} has no tokens")
                self.check_context(len(ctx) + len(c), 0)
                rows.append(ctx + c)
                conts.append(len(c))
        if not rows:
            return []
        torch = self._torch
        keep = max(conts) + 1
        ids, mask, pos = self.pad_batch(rows)
        with torch.inference_mode():
            logits = self.model(
                input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep, use_cache=False
            ).logits
            logp = torch.log_softmax(logits.float(), dim=-1)
        width = ids.shape[1]
        lls = np.empty(len(rows), dtype=np.float64)
        for r, n_c in enumerate(conts):
            # the kept logits cover positions width-keep .. width-1; the ones at width-n_c-1 .. width-2 predict
            # the option's tokens at width-n_c .. width-1
            targets = ids[r, width - n_c :]
            picked = logp[r, keep - n_c - 1 : keep - 1].gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            total = float(picked.sum())
            lls[r] = total / n_c if normalise else total
        out: list[np.ndarray] = []
        at = 0
        for opts in options:
            out.append(lls[at : at + len(opts)])
            at += len(opts)
        return out

    def token_counts(self, prompt: str, options: Sequence[str] = ()) -> tuple[int, int]:
        """(tokens of the formatted prompt, tokens of all the options together)."""
        self.load()
        return len(self.encode(prompt)), sum(len(self._continuation(o)) for o in options)

    # -- generation ------------------------------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[str | LLMItem], *, max_new_tokens: int | None = None, stop: Sequence[str] = ()
    ) -> list[Generation]:
        """One answer per prompt (KV cache on), each stopped at an end token, a stop string or its cap.
        ``max_new_tokens`` and ``stop`` are the defaults; an item's own ``max_new_tokens`` (up to the context),
        ``stop`` (in place of ``stop``) and decoding (:class:`~cascadeserve.models.llm_sampling.Sampling`) apply
        to its row. A chat through the template stops at its end-of-turn token (and the item's stop strings)."""
        self.load()
        items = [p if isinstance(p, LLMItem) else LLMItem(p) for p in prompts]
        default = int(max_new_tokens or self.max_new_tokens)
        rows: list[list[int]] = []
        caps: list[int] = []
        for it in items:
            asked = it.max_new_tokens
            ids = self.encode(it, asked or 1)
            rows.append(ids)
            caps.append(asked if asked is not None else max(1, min(default, self.max_length - len(ids))))
        stops = [
            it.stop if it.stop is not None else (() if it.messages is not None and self.templated(it) else tuple(stop))
            for it in items
        ]
        return self.generate_ids(rows, caps, stops, [it.sampling for it in items])

    def generate_ids(
        self,
        rows: Sequence[Sequence[int]],
        caps: Sequence[int],
        stops: Sequence[Sequence[str]],
        sampling: Sequence[Sampling],
        *,
        strip: bool = True,
    ) -> list[Generation]:
        """Answers to prompts given as token ids, each row with its own cap, stop strings and decoding, in one
        ``generate`` call (:class:`~cascadeserve.models.llm_sampling.RowControl`); ``strip``: strip the texts."""
        self.load()
        if not rows:
            return []
        torch = self._torch
        transformers = require("transformers", model=self.name)
        ids, mask, _ = self.pad_batch(rows)
        config = transformers.GenerationConfig(
            max_new_tokens=max(caps),
            do_sample=False,
            eos_token_id=self._stop_ids,
            pad_token_id=int(self.tokenizer.pad_token_id),
            output_logits=True,
            return_dict_in_generate=True,
        )
        control = RowControl(
            torch,
            self.tokenizer,
            width=int(ids.shape[1]),
            sampling=sampling,
            caps=caps,
            stops=stops,
            end_ids=self._stop_ids,
            force_id=self._stop_ids[0],
            device=self.device_used,
        )
        extra: dict[str, Any] = {}
        if control.needed():
            extra["logits_processor"] = transformers.LogitsProcessorList([control])
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **extra)
        new = out.sequences[:, ids.shape[1] :].cpu()
        steps = len(out.logits)
        logp = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.logits], dim=1).cpu()  # [B, T, V]
        first = torch.softmax(out.logits[0].float(), dim=-1).topk(2, dim=-1).values.cpu()
        best = logp.topk(TOP_LOGPROBS, dim=-1)  # what the OpenAI front end reports as top_logprobs
        best_lp, best_ids = best.values.tolist(), best.indices.tolist()
        ends = set(self._stop_ids)
        results: list[Generation] = []
        for b, prompt_ids in enumerate(rows):
            toks, text, finish = read_answer(self.tokenizer, new[b, : min(steps, caps[b])].tolist(), ends, stops[b])
            lps = tuple(float(logp[b, t, tok]) for t, tok in enumerate(toks))
            margin = float(first[b, 0] - first[b, 1])
            pieces = tuple(self.tokenizer.decode([t]) for t in toks)
            top = tuple(self.top_tokens(best_ids[b][t], best_lp[b][t]) for t in range(len(toks)))
            text = text.strip() if strip else text
            results.append(Generation(text, lps, margin, len(prompt_ids), len(toks), pieces, top, finish))
        return results

    def top_tokens(self, ids: Sequence[int], lps: Sequence[float]) -> tuple[tuple[str, float], ...]:
        """(token text, log-prob) pairs of the given token ids."""
        return tuple((self.tokenizer.decode([int(i)]), float(lp)) for i, lp in zip(ids, lps, strict=True))

    # -- costs -----------------------------------------------------------------------------------------------
    def time_costs(self, batch_size: int, prompt_tokens: int, steps: int = 8) -> tuple[float, float]:
        """One timed run: (prefill ms per prompt token, decode ms per step) for ``batch_size`` prompts of
        ``prompt_tokens`` tokens each, then ``steps`` single-token decode steps on the KV cache."""
        self.load()
        torch = self._torch
        vocab = int(self.tokenizer.vocab_size)
        rng = np.random.default_rng(prompt_tokens)
        rows = rng.integers(100, max(vocab - 1, 101), size=(batch_size, prompt_tokens)).tolist()
        ids, mask, pos = self.pad_batch(rows)
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            self._sync()
            t1 = time.perf_counter()
            # transformers 5 renamed the KV cache (argument and output field) from past_key_values to cache
            arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
            past = getattr(out, arg)
            for s in range(steps):
                mask = torch.cat([mask, torch.ones_like(nxt)], dim=-1)
                step_pos = torch.full_like(nxt, prompt_tokens + s)
                out = self.model(
                    input_ids=nxt, attention_mask=mask, position_ids=step_pos, use_cache=True, **{arg: past}
                )
                past = getattr(out, arg)
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            self._sync()
            t2 = time.perf_counter()
        return (t1 - t0) * 1000.0 / prompt_tokens, (t2 - t1) * 1000.0 / max(steps, 1)

    def _sync(self) -> None:
        if self.device_used.startswith("cuda"):
            self._torch.cuda.synchronize()

    # -- memory ----------------------------------------------------------------------------------------------
    def weights_mb(self) -> float | None:
        if self.model is None:
            return None
        tensors = [*self.model.parameters(), *self.model.buffers()]
        return float(sum(t.numel() * t.element_size() for t in tensors)) / 1e6

    def kv_cache_mb_per_token(self) -> float | None:
        """Keys and values of one token over all layers: 2 x layers x KV heads x head size x bytes per value."""
        if self.model is None:
            return None
        cfg = self.model.config
        cfg = getattr(cfg, "text_config", None) or cfg
        heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        width = int(next(self.model.parameters()).element_size())
        return 2.0 * int(cfg.num_hidden_layers) * heads * head_dim * width / 1e6

    def __repr__(self) -> str:
        return f"LocalLLM({self.name!r}, {str(self.path)!r}, device={self.device!r})"
