"""Profiles: a model family's measured facts (memory, runtimes per batch size, per-sample records)."""

from __future__ import annotations

from cascadeserve.profile.calibration import calibrate, costs_note
from cascadeserve.profile.certainty import (
    CERTAINTY_FUNCTIONS,
    CertaintyFn,
    certainty_function,
    margin,
    max_probability,
    negative_entropy,
)
from cascadeserve.profile.io import load_profile, record_batch_overhead, record_costs, save_profile
from cascadeserve.profile.profile import ModelProfile, Profile
from cascadeserve.profile.runtime import RuntimeCurve
from cascadeserve.profile.vote import Vote, useful_votes, with_votes

__all__ = [
    "CERTAINTY_FUNCTIONS",
    "CertaintyFn",
    "ModelProfile",
    "Profile",
    "RuntimeCurve",
    "Vote",
    "calibrate",
    "certainty_function",
    "costs_note",
    "load_profile",
    "margin",
    "max_probability",
    "negative_entropy",
    "record_batch_overhead",
    "record_costs",
    "save_profile",
    "useful_votes",
    "with_votes",
]
