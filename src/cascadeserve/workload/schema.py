"""The workload file's schema (``cascadeserve.yaml``): one model family, its data, devices, SLO, load and serving.

A workload says in one file what ``profile measure``, ``plan`` and ``serve`` otherwise take as flags::

    name: digits
    models: models.yaml            # or the models config inline: {input: ..., models: [...]}
    validation: digits             # labelled data: a file (relative to this file) or a built-in set
    devices: {count: 2, memory_mb: 512, kind: cpu}
    slo: {p95_ms: 100}             # or {accuracy: 0.9}: exactly one
    max_qps: 200                   # and/or trace: SPEC (the planner weights its QPS ranges by it)
    serve: {host: 127.0.0.1, port: 8000, auth_token_env: MY_TOKEN}

The classes here are pydantic models with ``extra="forbid"``, so a misspelt key is an error naming the key;
:func:`workload_json_schema` is the published JSON schema (``cascadeserve workload schema``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from cascadeserve.models.config import ModelsConfig

__all__ = [
    "DevicesSpec",
    "PlanSpec",
    "ProfileSpec",
    "ServeSpec",
    "SloSpec",
    "TuneSpec",
    "Workload",
    "workload_json_schema",
]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DevicesSpec(_Strict):
    """The devices the plan places replicas on: ``count`` alike devices of ``memory_mb`` each."""

    count: int = Field(default=1, ge=1, description="Number of devices.")
    memory_mb: float = Field(gt=0, description="Memory per device in MB.")
    kind: str = Field(default="cpu", min_length=1, description="Device kind, recorded in the plan (e.g. cpu, cuda).")


class SloSpec(_Strict):
    """Exactly one objective: p95 latency at most ``p95_ms`` (accuracy maximised), or accuracy at least
    ``accuracy`` (latency minimised)."""

    p95_ms: float | None = Field(default=None, gt=0, description="Latency SLO: p95 at most this many ms.")
    accuracy: float | None = Field(default=None, gt=0, le=1, description="Accuracy SLO: at least this.")

    def __str__(self) -> str:
        return f"p95 ≤ {self.p95_ms:g} ms" if self.p95_ms is not None else f"accuracy ≥ {self.accuracy:g}"

    @model_validator(mode="after")
    def _one(self) -> SloSpec:
        if (self.p95_ms is None) == (self.accuracy is None):
            raise ValueError("give exactly one of p95_ms and accuracy")
        return self


class ProfileSpec(_Strict):
    """How ``up`` (and ``profile measure --workload``) measures the family."""

    batch_sizes: str = Field(default="1,2,4,...,64", description="Batch sizes to time; '...' doubles.")
    repeats: int = Field(
        default=5,
        ge=1,
        description="Timed runs per batch size at least (their mean kept); more, up to 4x, until the mean is known "
        "to ±5 %.",
    )
    warmup: int = Field(default=1, ge=0, description="Untimed runs per batch size first.")
    threads: int | None = Field(default=None, ge=1, description="Intra-op threads per model (default: config's).")
    limit: int | None = Field(default=None, ge=1, description="Use only the first N validation rows.")
    # A model timed alone runs slower once it shares the host with the HTTP front end and the other devices (1.25-2x
    # on a 2-core box, more for GIL-bound models): a plan from the quiet profile promises a p95 the server misses.
    calibrate_s: float = Field(
        default=8.0,
        ge=0,
        description="Seconds to serve the measured models on this host (HTTP on 127.0.0.1, real inputs) and scale "
        "the profile to what their batches cost there (profile calibrate); 0: plan with the quiet profile.",
    )


class PlanSpec(_Strict):
    """Planner options (``plan``'s flags of the same names)."""

    ranges: int = Field(default=10, ge=1, description="Number of equal QPS ranges (gears).")
    max_busy: float = Field(default=1.0, ge=0.01, le=1.0, description="Device headroom: busiest device at most.")
    votes: int = Field(default=0, ge=0, description="Vote stages the planner may use (0: single models only).")
    seed: int = Field(default=0, description="Random seed.")


class TuneSpec(_Strict):
    """Online threshold tuning (``serve --tune``)."""

    target: float | None = Field(default=None, ge=0, le=1, description="Accuracy to hold (default: per gear).")
    budget: float = Field(default=0.01, ge=0, le=1, description="Accuracy budget.")
    reference: Literal["audit", "label"] = "audit"


class ServeSpec(_Strict):
    """Serving options (``serve``'s flags of the same names). Tokens are never written here: ``*_token_env``
    names the environment variable that holds each."""

    host: str = Field(default="127.0.0.1", description="Address to bind; loopback unless you mean otherwise.")
    port: int = Field(default=8000, ge=0, le=65535, description="TCP port (0: any free port).")
    batching: Literal["plan", "aimd", "quantile"] | None = Field(default=None, description="Batching policy.")
    cache_size: int = Field(default=0, ge=0, description="Prediction cache entries (0: off).")
    tune: bool | TuneSpec = Field(default=False, description="Online threshold tuning: true, or its options.")
    replan: Literal["auto", "notify", "off"] = Field(default="off", description="Re-plan on load drift.")
    admin_token_env: str | None = Field(default=None, description="Environment variable with the admin token.")
    auth_token_env: str | None = Field(default=None, description="Environment variable with the inference token.")

    @field_validator("admin_token_env", "auth_token_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_NAME.match(v):
            raise ValueError(f"{v!r} is not an environment variable name (the token itself never goes here)")
        return v


def _models_kind(v: Any) -> str:
    return "path" if isinstance(v, str) else "inline"


ModelsField = Annotated[
    Annotated[str, Tag("path")] | Annotated[ModelsConfig, Tag("inline")],
    Discriminator(_models_kind),
]


class Workload(_Strict):
    """One workload: what to serve, on what, under which objective and load."""

    name: str = Field(
        min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="The served model's name (V2 API)."
    )
    models: ModelsField = Field(description="A models config file (relative to this file), or its content inline.")
    validation: str = Field(
        min_length=1, description="Labelled data: FILE.csv | FILE.npz | FILE.jsonl (relative to this file), digits, "
        "tweets[:DIR]."
    )  # fmt: skip
    devices: DevicesSpec
    slo: SloSpec
    max_qps: float | None = Field(default=None, gt=0, description="The highest QPS to plan for.")
    trace: str | None = Field(
        default=None, min_length=1, description="A trace (file relative to this file, or synthetic:...) whose load "
        "distribution weights the QPS ranges; its busiest second is max_qps unless max_qps is given."
    )  # fmt: skip
    pythonpath: list[str] = Field(
        default_factory=list, description="Folders (relative to this file) put on the import path for the models' "
        "module:function references."
    )  # fmt: skip
    profile: ProfileSpec = Field(default_factory=ProfileSpec)
    plan: PlanSpec = Field(default_factory=PlanSpec)
    serve: ServeSpec = Field(default_factory=ServeSpec)

    @model_validator(mode="after")
    def _load(self) -> Workload:
        if self.max_qps is None and self.trace is None:
            raise ValueError("give max_qps or trace (or both)")
        return self


def workload_json_schema() -> dict[str, Any]:
    """The published JSON schema of the workload file (``cascadeserve workload schema``; a copy is
    ``docs/workload.schema.json``)."""
    schema = Workload.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "cascadeserve workload (cascadeserve.yaml)"
    return schema
