"""The real local LLMs, loaded once per test session (from the user cache that ``make`` fills; a first load converts
the GGUF, 30-180 s on 2 cores)."""

from __future__ import annotations

import pytest

from cascadeserve.models.base import MissingExtraError
from cascadeserve.models.llm_adapter import LLMAdapter


def _adapter(name: str, factory: str) -> LLMAdapter:
    from cascadeserve.models.families import llm

    try:
        path = getattr(llm, factory)()
    except MissingExtraError as e:  # the [llm] extra is part of dev; without it there is nothing to run
        pytest.skip(str(e))
    adapter = LLMAdapter(name, path, threads=2, max_new_tokens=8)
    adapter.load()
    return adapter


@pytest.fixture(scope="session")
def smollm() -> LLMAdapter:
    return _adapter("smollm2-135m", "smollm2_135m")


@pytest.fixture(scope="session")
def gemma() -> LLMAdapter:
    return _adapter("gemma3-270m", "gemma3_270m")
