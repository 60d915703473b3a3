"""The stock LLM harnesses, unchanged, against a served cascade: lm-eval and guidellm.

Serves the shipped example (examples/llm/models.yaml: SmolLM2-135M-Instruct, then Gemma 3 270M) with
``cascadeserve serve`` on 127.0.0.1 and a free port, as tests/http/test_openai_clients.py does (a fixed plan of
profiles/llm-sst2, SmolLM2 answering what it is at least 0.15 sure of), waits on ``GET /health``, then runs, each as
a subprocess from a separate harness venv (their installs are too heavy for the project's venv and for CI):

1. ``lm_eval --model local-completions`` on a local ``multiple_choice`` task (20 ARC-Easy questions from
   ../shared/data/datasets/llm/arc_easy_validation.jsonl): loglikelihood requests, ``echo: true, max_tokens: 1,
   logprobs: 1``, prompts sent as token ids of SmolLM2's tokenizer (``tokenizer_backend=huggingface``);
2. ``lm_eval --model local-chat-completions --apply_chat_template`` on a local ``generate_until`` task (20 SST-2
   reviews, "positive" or "negative", ``until: ["\\n"]``, which lm-eval sends as ``stop``);
3. ``guidellm run``: a synthetic constant-rate run (32 prompt tokens, 8 output tokens, 0.5 QPS, 60 s).

It prints each tool's outcome (finished or not, scores, errored requests) and writes a JSON summary (``--out``).

Install the harnesses (once; torch FIRST, a local CPU wheel, or pip pulls gigabytes of CUDA):
    python3 -m venv /work/harness
    /work/harness/bin/pip install torch==2.13.0
    /work/harness/bin/pip install "lm-eval[api]" transformers
    /work/harness/bin/pip install guidellm

Run (from the project root, with the project's venv; about 4 minutes on 2 cores):
    .venv/bin/python benchmarks/bench_llm_harnesses.py --harness-venv /work/harness --out reports/llm-harnesses.json

What it runs, with URL the served base and DIR SmolLM2's HF folder in ~/.cache/cascadeserve/llm/:
    lm_eval --model local-completions --tasks cs_arc_easy_mini --include_path TASKS \\
        --model_args model=llm,base_url=URL/v1/completions,num_concurrent=1,max_retries=1,\\
tokenizer_backend=huggingface,tokenizer=DIR \\
        --output_path OUT/lm_eval_completions
    lm_eval --model local-chat-completions --apply_chat_template --tasks cs_sst2_gen_mini --include_path TASKS \\
        --model_args model=llm,base_url=URL/v1/chat/completions,num_concurrent=1,max_retries=1 \\
        --gen_kwargs max_tokens=8 --output_path OUT/lm_eval_chat
    guidellm run --backend kind=openai_http,target=URL,model=llm --profile kind=constant,rate=0.5 \\
        --constraint kind=max_duration,seconds=60 --data kind=synthetic_text,prompt_tokens=32,output_tokens=8 \\
        --tokenizer kind=huggingface_auto,model=DIR --output kind=json,path=OUT/guidellm.json
(``--only lm-eval-mc,lm-eval-chat,guidellm`` picks some; ``--guidellm-args`` replaces guidellm's arguments after
``run`` when the installed version spells them otherwise.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "datasets" / "llm"
PROFILE = ROOT / "profiles" / "llm-sst2"
MODELS = ROOT / "examples" / "llm" / "models.yaml"
NAME = "llm"

MC_TASK = """task: cs_arc_easy_mini
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {data}
validation_split: validation
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{labels.index(answer)}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""

GEN_TASK = """task: cs_sst2_gen_mini
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {data}
validation_split: validation
output_type: generate_until
doc_to_text: "Is this movie review positive or negative? Answer with one word.\\nReview: {{{{sentence}}}}"
doc_to_target: "{{{{ 'positive' if label == 1 else 'negative' }}}}"
generation_kwargs:
  until: ["\\n"]
  do_sample: false
filter_list:
  - name: first-label
    filter:
      - function: regex
        regex_pattern: "(?i)(positive|negative)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: true
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def smollm2_folder() -> Path:
    from cascadeserve.models.families import llm
    from cascadeserve.models.llm import default_cache

    llm.smollm2_135m()  # assembles the HF folder from the package's GGUF when it is not there yet
    return next(default_cache().glob("SmolLM2-135M-Instruct*/"))


def write_tasks(folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    arc = [json.loads(line) for line in (DATA / "arc_easy_validation.jsonl").read_text().splitlines()[:n]]
    sst = [json.loads(line) for line in (DATA / "sst2_validation.jsonl").read_text().splitlines()[:n]]
    (folder / "arc_easy_mini.jsonl").write_text("".join(json.dumps(r) + "\n" for r in arc))
    (folder / "sst2_mini.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sst))
    (folder / "cs_arc_easy_mini.yaml").write_text(MC_TASK.format(data=folder / "arc_easy_mini.jsonl"))
    (folder / "cs_sst2_gen_mini.yaml").write_text(GEN_TASK.format(data=folder / "sst2_mini.jsonl"))


def start_server(work: Path, threshold: float) -> tuple[subprocess.Popen[bytes], str, Path]:
    from cascadeserve.cascade import Cascade
    from cascadeserve.plan import SLO, Device, fixed_plan
    from cascadeserve.profile import load_profile

    plan = fixed_plan(
        load_profile(PROFILE),
        Cascade(("smollm2-135m", "gemma3-270m"), (threshold,)),
        (Device(name="cpu0", memory_mb=4096),),
        slo=SLO(kind="p95_ms", value=300_000),
    )
    plan_path = plan.save(work / "plan.json")
    port = free_port()
    cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "serve", "--plan", str(plan_path)]
    cmd += ["--profile", str(PROFILE), "--models", str(MODELS), "--name", NAME]
    cmd += ["--port", str(port), "--timeout-ms", "300000", "--grace-s", "2"]
    log = work / "serve-stderr.txt"
    with log.open("wb") as err:
        proc = subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return proc, base, log
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.terminate()
            raise SystemExit("serve did not answer /health in 600 s")
        time.sleep(0.5)


def run_tool(name: str, cmd: list[str], log: Path, timeout_s: float) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.pop("VIRTUAL_ENV", None)
    print(f"== {name}: {shlex.join(cmd)}", flush=True)
    t0 = time.monotonic()
    try:
        with log.open("wb") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        rc = None
    wall = time.monotonic() - t0
    tail = log.read_text(errors="replace")[-2500:]
    return {
        "tool": name,
        "command": shlex.join(cmd),
        "returncode": rc,
        "finished": rc == 0,
        "wall_s": round(wall, 1),
        "log": str(log),
        "log_tail": tail,
    }


def lm_eval_scores(out_dir: Path, task: str) -> dict[str, Any]:
    files = sorted(out_dir.rglob("results_*.json"))
    if not files:
        return {}
    res = json.loads(files[-1].read_text())
    scores = {k: v for k, v in res.get("results", {}).get(task, {}).items() if isinstance(v, (int, float))}
    return {"scores": scores, "n_samples": res.get("n-samples", {}).get(task), "results_file": str(files[-1])}


def guidellm_summary(path: Path) -> dict[str, Any]:
    """Request counts, medians and p95s of guidellm's JSON report (0.8's layout: benchmarks[].metrics)."""
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    out: dict[str, Any] = {"report": str(path)}
    for bench in doc.get("benchmarks", []):
        metrics = bench.get("metrics", {})
        totals = metrics.get("request_totals") or bench.get("scheduler_metrics", {}).get("requests_made") or {}
        out["requests"] = {k: totals.get(k) for k in ("successful", "errored", "incomplete", "total")}

        def stat(key: str, which: str, metrics: dict[str, Any] = metrics) -> Any:
            m = metrics.get(key, {}).get("successful", {})
            return m.get(which) if which == "median" else m.get("percentiles", {}).get(which)

        keys = (
            "request_latency",
            "time_to_first_token_ms",
            "prompt_token_count",
            "output_token_count",
            "requests_per_second",
            "output_tokens_per_second",
        )
        out["median"] = {k: stat(k, "median") for k in keys}
        out["p95"] = {k: stat(k, "p95") for k in keys[:2]}
        errored = bench.get("requests", {}).get("errored") or []
        out["first_errors"] = [
            r.get("info", {}).get("error") or r.get("error") for r in errored[:3] if isinstance(r, dict)
        ]
        first = (bench.get("requests", {}).get("successful") or [{}])[0]
        out["sample_request"] = str(first.get("request_args", ""))[:400]
    return out


def counters(base: str) -> dict[str, float]:
    """The server's Prometheus counters (``*_total``) at this moment."""
    out: dict[str, float] = {}
    try:
        text = httpx.get(f"{base}/metrics", timeout=30).text
    except httpx.HTTPError:
        return out
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        key, _, value = line.rpartition(" ")
        if key.split("{")[0].endswith("_total"):
            with contextlib.suppress(ValueError):
                out[key] = float(value)
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the tool's run added to the server's counters (nonzero ones)."""
    return {k: v - before.get(k, 0.0) for k, v in sorted(after.items()) if v - before.get(k, 0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--harness-venv", required=True, type=Path, help="the venv with lm-eval and guidellm")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "llm-harnesses.json")
    ap.add_argument("--work", type=Path, default=None, help="folder for tasks, logs and the tools' outputs")
    ap.add_argument("--items", type=int, default=20)
    ap.add_argument("--threshold", type=float, default=0.15)
    ap.add_argument("--only", default="lm-eval-mc,lm-eval-chat,guidellm")
    ap.add_argument(
        "--tokenized-requests",
        default="true",
        choices=["true", "false"],
        help="lm-eval local-completions: token-id prompts (true, its default) or text",
    )
    ap.add_argument("--guidellm-rate", type=float, default=0.5)
    ap.add_argument("--guidellm-seconds", type=int, default=60)
    ap.add_argument("--guidellm-args", default=None, help="replaces guidellm's arguments after `run`")
    ap.add_argument("--timeout-s", type=float, default=1200)
    args = ap.parse_args()

    venv_bin = args.harness_venv / "bin"
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-llm-harnesses-"))
    work.mkdir(parents=True, exist_ok=True)
    tasks = work / "tasks"
    write_tasks(tasks, args.items)
    tok = smollm2_folder()
    only = set(args.only.split(","))
    load0 = os.getloadavg()
    proc, base, serve_log = start_server(work, args.threshold)
    print(f"serving {NAME} at {base} (log {serve_log}); work folder {work}", flush=True)
    results: list[dict[str, Any]] = []
    try:
        common = ["--include_path", str(tasks), "--batch_size", "1", "--log_samples"]
        if "lm-eval-mc" in only:
            out = work / "lm_eval_completions"
            margs = f"model={NAME},base_url={base}/v1/completions,num_concurrent=1,max_retries=1"
            margs += f",tokenizer_backend=huggingface,tokenizer={tok}"
            if args.tokenized_requests == "false":
                margs += ",tokenized_requests=False"
            cmd = [
                str(venv_bin / "lm_eval"),
                "--model",
                "local-completions",
                "--tasks",
                "cs_arc_easy_mini",
                "--model_args",
                margs,
                *common,
                "--output_path",
                str(out),
            ]
            c0 = counters(base)
            r = run_tool(
                "lm-eval local-completions (multiple_choice, loglikelihood)",
                cmd,
                work / "lm_eval_mc.log",
                args.timeout_s,
            )
            r.update(lm_eval_scores(out, "cs_arc_easy_mini"), server_counters=delta(c0, counters(base)))
            results.append(r)
        if "lm-eval-chat" in only:
            out = work / "lm_eval_chat"
            margs = f"model={NAME},base_url={base}/v1/chat/completions,num_concurrent=1,max_retries=1"
            cmd = [
                str(venv_bin / "lm_eval"),
                "--model",
                "local-chat-completions",
                "--apply_chat_template",
                "--tasks",
                "cs_sst2_gen_mini",
                "--model_args",
                margs,
                "--gen_kwargs",
                "max_tokens=8",
                *common,
                "--output_path",
                str(out),
            ]
            c0 = counters(base)
            r = run_tool(
                "lm-eval local-chat-completions (generate_until)", cmd, work / "lm_eval_chat.log", args.timeout_s
            )
            r.update(lm_eval_scores(out, "cs_sst2_gen_mini"), server_counters=delta(c0, counters(base)))
            results.append(r)
        if "guidellm" in only:
            report = work / "guidellm.json"
            if args.guidellm_args:
                gargs = shlex.split(
                    args.guidellm_args.replace("{URL}", base).replace("{DIR}", str(tok)).replace("{OUT}", str(report))
                )
            else:
                gargs = [
                    "--backend",
                    f"kind=openai_http,target={base},model={NAME}",
                    "--profile",
                    f"kind=constant,rate={args.guidellm_rate}",
                    "--constraint",
                    f"kind=max_duration,seconds={args.guidellm_seconds}",
                    "--data",
                    "kind=synthetic_text,prompt_tokens=32,output_tokens=8",
                    "--tokenizer",
                    f"kind=huggingface_auto,model={tok}",
                    "--output",
                    f"kind=json,path={report}",
                    "--disable-console-interactive",
                ]
            c0 = counters(base)
            r = run_tool(
                "guidellm run (synthetic, constant rate)",
                [str(venv_bin / "guidellm"), "run", *gargs],
                work / "guidellm.log",
                args.timeout_s,
            )
            r.update(guidellm_summary(report), server_counters=delta(c0, counters(base)))
            results.append(r)
    finally:
        proc.terminate()
        proc.wait(30)
    summary = {
        "url": base,
        "served": str(MODELS),
        "threshold": args.threshold,
        "items": args.items,
        "loadavg_before": load0,
        "loadavg_after": os.getloadavg(),
        "server_log": str(serve_log),
        "tools": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    for r in results:
        print(f"-- {r['tool']}: {'finished' if r['finished'] else 'FAILED'} (rc {r['returncode']}, {r['wall_s']} s)")
        for key in ("scores", "requests", "median", "p95", "first_errors", "server_counters"):
            if r.get(key):
                print(f"   {key}: {r[key]}")
        if not r["finished"]:
            print("   " + r["log_tail"][-1200:].replace("\n", "\n   "))
    print(f"load average before {load0}, after {summary['loadavg_after']}; summary: {args.out}")


if __name__ == "__main__":
    main()
