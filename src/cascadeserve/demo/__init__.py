"""The end-to-end demo (``cascadeserve demo``, ``make demo``): train, profile, plan, serve, replay, summarise, plot."""

from __future__ import annotations

from cascadeserve.demo.run import DemoOptions, DemoResult, run_demo

__all__ = ["DemoOptions", "DemoResult", "run_demo"]
