"""The public API of the core packages. A change to any ``__all__`` must be deliberate: update this list with it.

Every public module (no part of its path starts with ``_``) defines ``__all__``, and binds each name in it; that is
checked on the source (so modules that need an optional extra are checked too).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from cascadeserve.errors import CascadeServeError, InfeasibleError, PlanError, ProfileError, TraceError

EXPECTED: dict[str, list[str]] = {
    "cascadeserve": ["ServeConfig", "Server", "Workload", "__version__", "plan", "profile", "simulate"],
    "cascadeserve.api": [
        "DEFAULTS",
        "ServeConfig",
        "Server",
        "Serving",
        "assemble",
        "plan",
        "profile",
        "serve",
        "simulate",
    ],
    "cascadeserve.api.steps": [
        "Calibration",
        "MeasureProgress",
        "OnStep",
        "calibrate_here",
        "make_plan",
        "measure_family",
        "plan",
        "profile",
        "simulate",
        "write_calibrated",
    ],
    "cascadeserve.api.config": ["DEFAULTS", "ServeConfig"],
    "cascadeserve.api.serving": ["Server", "Serving", "assemble", "serve"],
    "cascadeserve.api.settings": [
        "batch_sizes",
        "clipper_options",
        "devices_from",
        "drift_settings_from",
        "headroom_note",
        "layer_options",
        "replan_options",
        "slo_from",
        "tuning_options",
        "with_batch_target",
    ],
    "cascadeserve.api.checks": [
        "check_options",
        "class_names",
        "cost_settings",
        "loopback",
        "measure_costs",
        "record_costs_in",
        "slowdowns",
        "thread_note",
    ],
    "cascadeserve.workload.values": ["workload_values"],
    "cascadeserve.errors": [
        "CascadeServeError",
        "InfeasibleError",
        "PlanError",
        "ProfileError",
        "RequestError",
        "TraceError",
        "UpstreamError",
        "yaml_problem",
    ],
    "cascadeserve.profile": [
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
    ],
    "cascadeserve.profile.certainty": [
        "CERTAINTY_FUNCTIONS",
        "CertaintyFn",
        "certainty_function",
        "margin",
        "max_probability",
        "negative_entropy",
        "to_probabilities",
    ],
    "cascadeserve.profile.io": ["load_profile", "record_batch_overhead", "record_costs", "save_profile"],
    "cascadeserve.profile.llm_certainty": [
        "GENERATION_SIGNALS",
        "LLM_SIGNALS",
        "SCORING_SIGNALS",
        "GenerationSignal",
        "LogisticCalibration",
        "auroc",
        "first_token_margin",
        "generation_signals",
        "mean_logprob",
        "min_logprob",
        "q10_logprob",
        "scoring_signals",
    ],
    "cascadeserve.profile.llm_side": [
        "LLMCosts",
        "LLMTokens",
        "read_calibration",
        "read_costs",
        "read_signals",
        "read_tokens",
        "signal_report",
        "tokens_path",
        "write_calibration",
        "write_costs",
        "write_outputs",
        "write_signals",
        "write_tokens",
    ],
    "cascadeserve.models.llm": ["TOP_LOGPROBS", "Generation", "LocalLLM", "default_cache"],
    "cascadeserve.models.llm_adapter": ["LLMAdapter", "option_probabilities"],
    "cascadeserve.models.llm_echo": ["echo", "prompt_logprobs"],
    "cascadeserve.models.llm_sampling": [
        "GREEDY",
        "MAX_STOP",
        "RowControl",
        "Sampling",
        "SamplingError",
        "parse_sampling",
        "parse_stop",
        "read_answer",
    ],
    "cascadeserve.models.upstream": ["RETRY_STATUSES", "UpstreamAdapter", "UpstreamOptions"],
    "cascadeserve.policy.failure": ["FailureKind", "StageFailureDecision", "on_stage_failure"],
    "cascadeserve.profile.profile": ["ModelProfile", "Profile"],
    "cascadeserve.profile.noise": [
        "BUSY_LOAD_PER_CORE",
        "CI_TARGET",
        "NEAR_ZERO_MS",
        "ModelTiming",
        "PointNoise",
        "host_load",
        "measurement_notes",
        "plan_warnings",
    ],
    "cascadeserve.models.records": ["MEASURED_DIR", "ModelRecord", "resume_record"],
    "cascadeserve.models.timing": [
        "fit_fixed_and_slope",
        "point_noise",
        "relative_ci",
        "repeat_until_stable",
        "timed_mean",
    ],
    "cascadeserve.profile.runtime": ["RuntimeCurve"],
    "cascadeserve.profile.tokens": [
        "PricedModel",
        "TokenCost",
        "TokenTables",
        "batch_seconds",
        "expected_max",
        "sample_weights",
        "token_tables",
    ],
    "cascadeserve.profile.host": [
        "HostFit",
        "busy_at",
        "contended",
        "fit_contention",
        "host_groups",
        "host_peers",
        "host_share",
        "size_factors",
        "trimmed_mean",
    ],
    "cascadeserve.profile.spread": [
        "MAX_SPREAD",
        "SPREAD_DRAWS",
        "SpreadFamily",
        "lognormal_sigma",
        "residual_spread",
        "rule_ratios",
        "served_spread",
        "spread_draws",
        "spread_table",
    ],
    "cascadeserve.cascade": [
        "BITSET_MAX_SAMPLES",
        "Cascade",
        "CascadeEval",
        "enumerate_frontier",
        "evaluate",
        "pareto_front",
        "stage_load",
    ],
    "cascadeserve.plan": [
        "DEFAULT_MAX_WAIT_MS",
        "SCHEMA_VERSION",
        "SLO",
        "UPSTREAM_KIND",
        "Device",
        "Gear",
        "GearPlan",
        "GearReplica",
        "Replica",
        "fixed_plan",
        "load_plan",
        "plan_profile",
        "with_upstream_devices",
    ],
    "cascadeserve.policy": [
        "DEFAULT_SLO_MS",
        "LAST_STAGE",
        "AdmissionDecision",
        "AdmissionPolicy",
        "AimdBatchLimit",
        "AimdDecision",
        "BatchDecision",
        "BatchMembers",
        "BatchTrigger",
        "Candidate",
        "DeadlineDecision",
        "DrainMeter",
        "GearDecision",
        "GearPolicy",
        "GearSchedule",
        "GearSelector",
        "PlanTables",
        "QpsMeter",
        "Readiness",
        "Route",
        "Routers",
        "SmoothWeightedRoundRobin",
        "WaitBudget",
        "batch_members",
        "batch_size",
        "drain_trigger",
        "is_sure",
        "next_batch",
        "on_deadline",
        "readiness",
        "sure_mask",
        "swrr_sequence",
    ],
    "cascadeserve.policy.admission": [
        "DEFAULT_SLO_MS",
        "AdmissionDecision",
        "AdmissionPolicy",
        "DeadlineDecision",
        "DrainMeter",
        "Readiness",
        "WaitBudget",
        "on_deadline",
        "readiness",
    ],
    "cascadeserve.policy.aimd": ["AimdBatchLimit", "AimdDecision"],
    "cascadeserve.policy.batching": [
        "BatchDecision",
        "BatchMembers",
        "BatchTrigger",
        "Candidate",
        "batch_members",
        "batch_size",
        "drain_trigger",
        "next_batch",
    ],
    "cascadeserve.policy.forwarding": ["LAST_STAGE", "is_sure", "sure_list", "sure_mask"],
    "cascadeserve.policy.gears": ["GearDecision", "GearPolicy", "GearSelector"],
    "cascadeserve.policy.qps": ["MAX_QPS_WINDOW_S", "QpsMeter", "check_qps", "max_window_ticks", "measurement_sd"],
    "cascadeserve.policy.routing": ["SmoothWeightedRoundRobin", "swrr_sequence"],
    "cascadeserve.policy.schedule": ["GearSchedule"],
    "cascadeserve.policy.tables": ["PlanTables", "Route", "Routers"],
    "cascadeserve.policy.tuning": [
        "MIN_STEP",
        "AuditSampler",
        "OnlineTuning",
        "OutcomeWindow",
        "Scores",
        "ThresholdDecision",
        "ThresholdTuner",
        "TuneResult",
        "hill_climb",
        "score",
    ],
    "cascadeserve.policy.drift": ["DriftDecision", "LoadDriftDetector", "ks_distance", "range_weights", "scale_factor"],
    "cascadeserve.http": [
        "App",
        "PrometheusObserver",
        "ProtocolError",
        "ServedModel",
        "Server",
        "ServerOptions",
        "build_app",
        "create_app",
        "decode_infer_request",
        "encode_infer_response",
    ],
    "cascadeserve.http.app": [
        "ROUTERS",
        "FrontEnd",
        "Router",
        "ServedModel",
        "ServerOptions",
        "create_app",
        "health_routes",
        "metrics_routes",
        "model_routes",
        "plan_routes",
        "repository_routes",
    ],
    "cascadeserve.http.control": ["AuthError", "PlanRejected", "check_bearer", "check_plan", "parse_plan"],
    "cascadeserve.http.infer": [
        "OUTPUTS",
        "OUTPUT_SHAPE",
        "InferCore",
        "InferError",
        "Inferred",
        "ServedModel",
        "metadata_shape",
        "model_config",
    ],
    "cascadeserve.grpc": ["GrpcFrontEnd"],
    "cascadeserve.grpc.service": ["GrpcFrontEnd"],
    "cascadeserve.grpc.tensors": [
        "decode_classes",
        "decode_inputs",
        "decode_parameters",
        "decode_shm_outputs",
        "encode_response",
    ],
    "cascadeserve.http.classification": ["CLASSIFIED", "check_classes", "classified"],
    "cascadeserve.http.logsettings": ["FORMATS", "LOG", "LogSettings"],
    "cascadeserve.http.tracesettings": ["DEFAULTS", "TraceSettings"],
    "cascadeserve.http.settings": ["check_admin", "settings_body", "settings_routes"],
    "cascadeserve.http.shared": ["EXTENSIONS", "ServerShared"],
    "cascadeserve.http.shared_memory": [
        "NO_CUDA",
        "SHM_ROOT",
        "Region",
        "SystemSharedMemory",
        "Target",
        "write_outputs",
    ],
    "cascadeserve.http.shm_routes": ["check_register", "shm_routes"],
    "cascadeserve.http.openapi": ["InferRequest", "InferTensor", "RequestedOutput", "describe", "openapi_document"],
    "cascadeserve.http.stats": ["InferenceStats"],
    "cascadeserve.http.triton_metrics": ["REASONS", "TRITON_METRICS", "RequestCounts", "TritonCollector", "exposition"],
    "cascadeserve.http.metrics": ["CONTENT_TYPE", "PrometheusObserver"],
    "cascadeserve.http.server": ["App", "Server", "build_app", "check_labels", "with_repository"],
    "cascadeserve.http.root": ["CASCADES", "root_document", "root_routes"],
    "cascadeserve.http.repository": ["Builder", "Control", "LoadError", "Repository", "RepositoryError"],
    "cascadeserve.http.asgi": ["Labelled", "Lifespan", "replaying"],
    "cascadeserve.http.model_control": ["MODES", "ModelControl"],
    "cascadeserve.http.persist": ["PlanWatcher", "SavedPlan", "ServerState", "plan_base", "write_atomic"],
    "cascadeserve.workload.repository": ["CascadeFiles", "ModelRepository", "load_parameters", "repository_builder"],
    "cascadeserve.http.connections": ["ConnectionLimits", "protocol_class"],
    "cascadeserve.http.failures": ["LOG", "public_error", "request_id"],
    "cascadeserve.http.openai_params": ["MAX_PROMPTS", "Ask", "OpenAIError", "parse_chat", "parse_completion"],
    "cascadeserve.http.jsonshape": ["MAX_DEPTH", "MAX_ELEMENTS", "shape_error"],
    "cascadeserve.http.limits": [
        "MAX_DEPTH",
        "MAX_ELEMENTS",
        "MAX_OPTIONS",
        "MAX_OPTION_CHARS",
        "MAX_PROMPT_CHARS",
        "MAX_TOKENS",
        "LimitError",
        "check_max_tokens",
        "check_options",
        "check_prompt",
        "check_text_rows",
        "loads",
        "read_body",
    ],
    "cascadeserve.http.v2": [
        "DTYPES",
        "HEADER_LENGTH",
        "DecodedRequest",
        "OutputTensor",
        "ProtocolError",
        "TensorMemory",
        "bf16_bits",
        "binary_tensor",
        "check_requested",
        "class_count",
        "decode_infer_request",
        "encode_infer_response",
        "listed_tensor",
        "tensor_bytes",
        "tensor_header",
    ],
    "cascadeserve.eval": [
        "CompareResult",
        "SystemGrid",
        "compare",
        "degradation",
        "evaluate_system",
        "family_max_qps",
        "grid_table",
        "min_devices",
        "pareto",
        "run_all",
        "sliding",
        "trade_off_curves",
        "versions",
        "write_report",
    ],
    "cascadeserve.eval.grid": ["CompareResult", "SystemGrid", "compare", "evaluate_system", "min_devices"],
    "cascadeserve.eval.plots": ["plot_ablation", "plot_curves", "plot_heatmaps", "plot_timeline", "plot_tuning"],
    "cascadeserve.eval.run_figures": [
        "RequestLog",
        "frontier_figure",
        "plan_figure",
        "plot_frontier",
        "plot_plan",
        "plot_timeline",
        "request_log",
        "timeline_figure",
    ],
    "cascadeserve.eval.report": ["claims_table", "family_max_qps", "grid_table", "run_all", "versions", "write_report"],
    "cascadeserve.eval.timeline": ["degradation", "pareto", "sliding", "trade_off_curves"],
    "cascadeserve.eval.fidelity": [
        "CALIBRATION_REQUESTS",
        "FidelityRow",
        "Overheads",
        "calibrate",
        "fidelity",
        "mean_qps",
        "wait_ready",
    ],
    "cascadeserve.eval.loadgen": ["KEPT_ERRORS", "LoadReport", "run_load"],
    "cascadeserve.cli": ["app", "main", "run"],
    "cascadeserve.cli.app": ["app", "console", "err_console", "print_json", "run"],
    "cascadeserve.cli.root": ["app", "console", "err_console", "invocation", "print_json", "set_invocation"],
    "cascadeserve.runtime": [
        "Answer",
        "Backend",
        "BatchEvent",
        "BatchOutput",
        "ClientGone",
        "Clock",
        "DeadlineExceeded",
        "Device",
        "EmulatedDevice",
        "FakeClock",
        "Fanout",
        "Generation",
        "InputSpec",
        "LocalBackend",
        "LocalPlacement",
        "LocalTransport",
        "ModelConfig",
        "ModelFailed",
        "ModelFn",
        "MonotonicClock",
        "NullObserver",
        "Observer",
        "Overloaded",
        "Placement",
        "Recorder",
        "Request",
        "Runtime",
        "RuntimeOptions",
        "RuntimeStopped",
        "ServingError",
        "ThreadDevice",
        "TickEvent",
        "TooLarge",
        "Transport",
        "VirtualClock",
        "answer_early",
        "arm_deadline",
        "call_later",
        "emulated_runtime",
        "load_model",
        "load_model_config",
        "local_runtime",
        "run_virtual",
    ],
    "cascadeserve.runtime.transport": ["LocalTransport", "Transport", "Waker"],
    "cascadeserve.runtime.tuning": ["ServingTuning", "TuningFactory", "change_json", "continuation", "extend_trails"],
    "cascadeserve.http.tuning": ["drop_tuning_report", "tuned_plan_json"],
    "cascadeserve.runtime.placement": ["LocalPlacement", "Placement"],
    "cascadeserve.simulate": ["BatchRecord", "SimResult", "simulate"],
    "cascadeserve.simulate.engine": ["Scenario", "simulate", "tick_windows"],
    "cascadeserve.simulate.reference": ["run_reference"],
    "cascadeserve.simulate.scenario": ["Scenario"],
    "cascadeserve.runtime.virtual": ["VirtualClock", "VirtualDeadlock", "run_virtual"],
    "cascadeserve.simulate.hops": ["charge_front_door", "charge_hops", "expected_hops", "hop_costs", "lognormal_sigma"],
    "cascadeserve.planner": [
        "STATIC_CANDIDATES",
        "SUBMODULES",
        "ZIPF_EXPONENT",
        "Balance",
        "Candidate",
        "Frontier",
        "Load",
        "LoadCheck",
        "LoopInfeasible",
        "LoopResult",
        "PlacementError",
        "Planner",
        "PlannerReport",
        "QpsDistribution",
        "Step",
        "TraceCheck",
        "balance",
        "check_load",
        "default_batch_caps",
        "place_replicas",
        "qps_ranges",
        "qps_scale_for",
        "run_loop",
        "search_cascades",
        "static_cascades",
        "static_plan",
    ],
    "cascadeserve.backends.ray": [
        "InferenceServer",
        "ModelSource",
        "RayBackend",
        "RayOptions",
        "RayRuntime",
        "ServerLost",
        "model_sources",
        "server_actors",
    ],
}

# Packages that re-export names from their submodules: the objects must be the same.
REEXPORTS = {
    "cascadeserve.profile": [
        "cascadeserve.profile.calibration",
        "cascadeserve.profile.certainty",
        "cascadeserve.profile.io",
        "cascadeserve.profile.profile",
        "cascadeserve.profile.runtime",
        "cascadeserve.profile.vote",
    ],
    "cascadeserve.policy": [
        "cascadeserve.policy.admission",
        "cascadeserve.policy.aimd",
        "cascadeserve.policy.batching",
        "cascadeserve.policy.forwarding",
        "cascadeserve.policy.gears",
        "cascadeserve.policy.qps",
        "cascadeserve.policy.routing",
        "cascadeserve.policy.schedule",
        "cascadeserve.policy.tables",
    ],
    "cascadeserve.http": [
        "cascadeserve.http.app",
        "cascadeserve.http.metrics",
        "cascadeserve.http.server",
        "cascadeserve.http.v2",
    ],
    "cascadeserve.grpc": ["cascadeserve.grpc.service"],
    # eval.plots, eval.run_figures, eval.fidelity and eval.loadgen are imported on their own (matplotlib, HTTP clients)
    "cascadeserve.eval": ["cascadeserve.eval.grid", "cascadeserve.eval.report", "cascadeserve.eval.timeline"],
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_all_is_exactly_the_expected_list(module: str) -> None:
    mod = importlib.import_module(module)
    assert list(mod.__all__) == EXPECTED[module]


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_every_public_name_exists(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert missing == []


@pytest.mark.parametrize("package", sorted(REEXPORTS))
def test_package_reexports_are_the_submodule_objects(package: str) -> None:
    pkg = importlib.import_module(package)
    exported = set(pkg.__all__)
    seen: set[str] = set()
    for sub in REEXPORTS[package]:
        mod = importlib.import_module(sub)
        for name in mod.__all__:
            if name in exported:
                assert getattr(pkg, name) is getattr(mod, name), f"{package}.{name}"
                seen.add(name)
    assert seen == exported


def test_version() -> None:
    import cascadeserve

    assert cascadeserve.__version__ == "0.1.0"


@pytest.mark.parametrize("cls", [ProfileError, PlanError, TraceError, InfeasibleError])
def test_user_errors_derive_from_the_base_and_exit_2(cls: type[CascadeServeError]) -> None:
    assert issubclass(cls, CascadeServeError)
    assert cls.exit_code == 2


def test_located_error_rendering() -> None:
    assert str(ProfileError("bad", path="f.csv", line=3, column="certainty")) == "f.csv, line 3, column certainty: bad"
    assert str(PlanError("bad", path="p.json")) == "p.json: bad"
    assert str(TraceError("bad", line=2, column=7)) == "line 2, column 7: bad"
    assert str(ProfileError("bad")) == "bad"
    e = ProfileError("bad", path="f.csv", line=3)
    assert (e.message, e.path, e.line, e.column) == ("bad", "f.csv", 3, None)


SRC = Path(__file__).resolve().parents[1] / "src" / "cascadeserve"
PUBLIC_MODULES = sorted(
    p.relative_to(SRC).as_posix()
    for p in SRC.rglob("*.py")
    if not any(part.startswith("_") and part != "__init__.py" for part in p.relative_to(SRC).parts)
    and not (p.parent.name == "protos" and "_pb2" in p.name)  # generated by grpcio-tools (scripts/gen_grpc.py)
)


def _bound_names(body: list[ast.stmt]) -> set[str]:
    """Names a module body binds at its top level (looking inside ``if`` and ``try`` blocks)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            for block in (node.body, node.orelse, getattr(node, "finalbody", [])):
                names |= _bound_names(block)
            for handler in getattr(node, "handlers", []):
                names |= _bound_names(handler.body)
    return names


def test_public_modules_are_found() -> None:
    assert "plan.py" in PUBLIC_MODULES and "cli/app.py" in PUBLIC_MODULES and "eval/fidelity.py" in PUBLIC_MODULES


@pytest.mark.parametrize("relpath", PUBLIC_MODULES)
def test_every_public_module_defines_all(relpath: str) -> None:
    tree = ast.parse((SRC / relpath).read_text(encoding="utf-8"), filename=relpath)
    declared = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in (getattr(node, "targets", None) or [node.target])
        )
    ]
    assert declared, f"src/cascadeserve/{relpath} defines no __all__"
    names = ast.literal_eval(declared[-1]) if declared[-1] is not None else None
    assert isinstance(names, list | tuple), f"src/cascadeserve/{relpath}: __all__ must be a literal list"
    unbound = sorted(set(names) - _bound_names(tree.body))
    assert unbound == [], f"src/cascadeserve/{relpath}: __all__ names what the module does not define: {unbound}"
