"""Real model families: ``digits`` (torch, embedded, the demo's default) and ``tweets`` (the ``[text]`` extra)."""

from __future__ import annotations

__all__: list[str] = []
