"""Build the GPU-class model families: real per-sample predictions paired with published V100 BERT runtimes.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/gpu_families.py`` (writes ``profiles/tweets-bert-v100`` and
``profiles/sentences-bert-v100``; ``--check`` only compares what it would write with what is committed).

The committed families are cheap CPU models (one device carries the paper's 7,600 QPS), so their cost grids
cannot show what cascades save where models need many GPUs. These two families keep every sample's prediction
and certainty of a committed profile and replace the models' costs by the runtimes that the CascadeServe authors
published for the BERT family on an NVIDIA V100 32 GB (``benchmarks/data/cascadeserve_bert_v100.json``, an excerpt
of ``code/profiling/models/bert.json`` in github.com/ferdiko/ken_submission; see that file's ``_source``).

**Pairing rule (the same for both families):** the ``k`` models of the source profile, ordered by size (memory,
the committed profiles' own order), take the runtimes and memory of the ``k`` *largest* of the paper's five BERT
sizes (Tiny, Mini, Small, Medium, Base; §6.1), in the same order, so the most accurate model always costs as
much as BERT Base and smaller models cost as much as smaller BERTs. BERT Large (in the file, not in the paper's
family) is not used. Each model is named ``<source model>-as-<bert size>`` so that no reader mistakes whose
costs they are.

* ``tweets-bert-v100``: ``profiles/tweets-text5`` (TweetEval sentiment, 2,000 validation tweets; nb-words,
  lr-words, lr-chars, minilm-l3, minilm-l6) as Tiny, Mini, Small, Medium, Base: the paper's own family and task
  kind (BERT sizes on tweet sentiment).
* ``sentences-bert-v100``: ``profiles/sentences`` (UCI sentiment sentences, 900 validation sentences; nb-words,
  tfidf-lr, minilm-l3, minilm-l6) as Mini, Small, Medium, Base.

No per-batch overhead is recorded (the published runtimes are the authors' batch times). The V100's 32.5 GB is in
each profile's ``device`` line; ``compare --device-memory-mb 32500`` gives the paper's hardware.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, load_profile, save_profile  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "cascadeserve_bert_v100.json"
PAPER_SIZES = ("tiny", "mini", "small", "medium", "base")  # the paper's BERT family (§6.1), smallest first
FAMILIES = {"tweets-bert-v100": "tweets-text5", "sentences-bert-v100": "sentences"}


def paired(source: Profile, name: str, bert: dict[str, dict[str, object]], origin: str) -> Profile:
    """``source``'s records with the runtimes and memory of the ``k`` largest paper BERT sizes, in size order."""
    order = sorted(range(len(source.models)), key=lambda i: source.models[i].memory_mb)
    if order != list(range(len(source.models))):
        raise SystemExit(f"{source.name}: models are not listed smallest first; the pairing rule assumes it")
    sizes = PAPER_SIZES[len(PAPER_SIZES) - len(source.models) :]
    models = []
    for m, size in zip(source.models, sizes, strict=True):
        entry = bert[size]
        rt = {int(b): float(v) for b, v in dict(entry["runtime_ms"]).items()}  # type: ignore[call-overload]
        mem_mb = float(entry["memory_bytes"]) / 1e6  # type: ignore[arg-type]
        models.append(ModelProfile(f"{m.name}-as-{size}", mem_mb, RuntimeCurve.from_mapping(rt)))
    pairs = ", ".join(f"{m.name} = BERT {s}" for m, s in zip(source.models, sizes, strict=True))
    return Profile(
        name=name,
        models=tuple(models),
        sample_ids=source.sample_ids.copy(),
        labels=source.labels.copy(),
        predictions=source.predictions.copy(),
        certainties=source.certainties.copy(),
        task=source.task,
        device="NVIDIA V100 32 GB (32.5 GB; published runtimes, not measured here)",
        source=(
            f"predictions and certainties: profiles/{source.name} ({source.n_samples} samples; {source.source}); "
            f"runtimes and memory: {origin}; paired by size rank to the largest {len(sizes)} of the paper's BERT "
            f"sizes: {pairs}; built by benchmarks/gpu_families.py"
        ),
    )


def build(out_root: Path) -> list[Path]:
    """Write both families under ``out_root``; returns their directories."""
    doc = json.loads(DATA.read_text(encoding="utf-8"))
    src = doc["_source"]
    origin = f"{src['file']} at {src['repository']} (commit {src['commit'][:12]}; excerpt {DATA.relative_to(ROOT)})"
    out = []
    for name, source in FAMILIES.items():
        prof = paired(load_profile(ROOT / "profiles" / source), name, doc["models"], origin)
        out.append(save_profile(prof, out_root / name))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="Compare with the committed profiles; write nothing.")
    args = ap.parse_args()
    if not args.check:
        for d in build(ROOT / "profiles"):
            print(f"wrote {d.relative_to(ROOT)}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        bad = []
        for d in build(Path(tmp)):
            for f in sorted(p for p in d.rglob("*") if p.is_file()):
                rel = f.relative_to(tmp)
                committed = ROOT / "profiles" / rel
                if not committed.exists() or committed.read_bytes() != f.read_bytes():
                    bad.append(str(rel))
        print("identical" if not bad else "differs: " + ", ".join(bad))
        raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
