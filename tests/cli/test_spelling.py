"""One spelling per concept across commands: the options every command lists (click introspection) hold one name
per concept, inputs are options, and the old spellings still work, hidden from --help, with a one-line warning."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer

from cascadeserve.cascade import Cascade
from cascadeserve.cli import app, run
from cascadeserve.cli.spelling import OLD_OPTIONS, POSITIONAL, rewrite
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, save_profile

# every spelling a concept has had (or could plausibly get); each group may use one across all commands
CONCEPTS = {
    "latency SLO": {"--slo-p95-ms", "--slo-ms", "--latency-slos", "--latency-slo", "--p95-ms", "--slo-latency-ms"},
    "accuracy SLO": {"--slo-accuracy", "--accuracy-targets", "--accuracy-target", "--accuracy-slo", "--min-accuracy"},
    "a duration": {"--duration-s", "--duration", "--seconds", "--duration-ms"},
    "highest QPS": {"--max-qps", "--peak-qps", "--qps-max"},
    "a server": {"--url", "--server", "--address-url", "--endpoint"},
    "the inference token": {"--auth-token", "--token", "--bearer-token"},
    "plan files": {"--plan", "--plans", "--plan-file"},
    "profile folders": {"--profile", "--profiles", "--profile-dir"},
    "the workload file": {"--workload", "--workload-file", "--config"},
    "the served model's name": {"--name", "--model", "--model-name"},
    "where figures go": {"--plot", "--plots", "--figure", "--figures"},
    "running on the runtime": {"--runtime", "--real", "--on-runtime"},
}
# the only positional arguments: the workload file or folder of up, init and workload check
POSITIONAL_OK = {"up", "init", "workload check"}


def _commands() -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        if path:
            out[" ".join(path)] = cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def test_each_concept_has_one_spelling_across_commands() -> None:
    used: dict[str, set[str]] = {}
    for cmd in _commands().values():
        for p in cmd.params:
            if p.param_type_name == "option" and not getattr(p, "hidden", False):
                for o in p.opts:
                    used.setdefault(o, set())
    for concept, names in CONCEPTS.items():
        spelled = sorted(names & set(used))
        assert len(spelled) <= 1, f"{concept} is spelled {spelled}"
    assert "--slo-p95-ms" in used and "--duration-s" in used


def test_an_option_takes_the_same_kind_of_value_in_every_command() -> None:
    kinds: dict[str, set[tuple[bool, tuple[str, ...]]]] = {}
    for cmd in _commands().values():
        for p in cmd.params:
            if p.param_type_name != "option" or getattr(p, "hidden", False):
                continue
            for o in p.opts:  # a flag, a value, or a flag with its negation (--drop-zero/--keep-zero)
                kinds.setdefault(o, set()).add((bool(p.is_flag), tuple(p.secondary_opts)))
    mixed = {o: k for o, k in kinds.items() if len(k) > 1}
    assert mixed == {}, f"options declared differently across commands: {mixed}"


def test_bench_names_the_model_as_serve_does_and_defaults_to_serves_address() -> None:
    commands = _commands()
    serve_opts = {o for p in commands["serve"].params for o in p.opts}
    bench = {o: p for p in commands["bench"].params for o in p.opts}
    assert "--name" in serve_opts and "--name" in bench and "--model" not in bench
    assert bench["--url"].default == "http://127.0.0.1:8000" and bench["--name"].default is None


def test_inputs_are_options_not_positional_arguments() -> None:
    for name, cmd in _commands().items():
        args = [p.name for p in cmd.params if p.param_type_name == "argument"]
        assert not args or name in POSITIONAL_OK, f"{name} takes {args} positionally"


def test_old_spellings_map_to_options_that_exist_and_are_hidden_from_help() -> None:
    commands = _commands()
    every = {o for c in commands.values() for p in c.params if p.param_type_name == "option" for o in p.opts}
    for where, table in OLD_OPTIONS.items():
        # a spelling retired everywhere is no option anywhere; one retired in a command is none of that command's
        params = [] if where == "*" else commands[where].params
        opts = every if where == "*" else {o for p in params if p.param_type_name == "option" for o in p.opts}
        for old, new in table.items():
            assert new in opts and old not in opts, (where, old, new)
    for name, opt in POSITIONAL.items():
        assert opt in {o for p in commands[name].params for o in p.opts}, name


def test_rewrite_replaces_old_spellings_and_warns_once_each() -> None:
    root = typer.main.get_command(app)
    said: list[str] = []
    got = rewrite(root, ["serve", "--slo-ms=100", "--plan", "--slo-ms", "--profile", "p"], said.append)
    assert got == ["serve", "--slo-p95-ms=100", "--plan", "--slo-ms", "--profile", "p"]  # a value stays a value
    assert said == ["--slo-ms is deprecated and will be removed; use --slo-p95-ms"]
    said.clear()
    got = rewrite(root, ["profile", "show", "--json", "DIR"], said.append)
    assert got == ["profile", "show", "--json", "--profile", "DIR"] and len(said) == 1
    assert rewrite(root, ["eval", "planner", "--slos", "6"], said.append)[2] == "--slo-count"
    assert rewrite(root, ["bench", "--duration", "5"], said.append)[1] == "--duration-s"
    assert rewrite(root, ["bench", "--model", "toy"], said.append)[1] == "--name"
    assert rewrite(root, ["compare", "--plots", "d"], said.append)[1] == "--plot"
    assert rewrite(root, ["report", "--real"], said.append)[1] == "--runtime"
    assert rewrite(root, ["profile", "measure", "--name", "p"], said.append)[2] == "--profile-name"


def test_an_old_positional_input_still_works_with_a_warning(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = save_profile(toy_profile, tmp_path / "toy")
    assert run(["profile", "show", str(d), "--json"]) == 0
    captured = capsys.readouterr()
    assert '"name": "toy"' in captured.out
    assert f"warning: the profile as a positional argument is deprecated; use --profile {d}" in captured.err


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("slo", ["--slo-ms", "--slo-p95-ms"])
def test_serve_aimd_takes_its_latency_target_from_the_slo_given(
    toy_profile: Profile, tmp_path: Path, slo: str
) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))  # no SLO in it
    plan_path = plan.save(tmp_path / "plan.json")
    port = _port()
    cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "serve", "--plan", str(plan_path)]
    cmd += ["--profile", str(prof_dir), "--emulate", "--port", str(port), "--batching", "aimd", slo, "100"]
    before = {p.name: p.read_bytes() for p in prof_dir.rglob("*") if p.is_file()}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert proc.poll() is None, "serve exited"
        body = {"inputs": [{"name": "sample_id", "shape": [1], "datatype": "INT64", "data": [3]}]}
        r = httpx.post(f"{url}/v2/models/toy/infer", json=body, timeout=30)
        assert r.status_code == 200, r.text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    err = proc.stderr.read() if proc.stderr else ""
    assert ("warning: --slo-ms is deprecated" in err) == (slo == "--slo-ms"), err
    assert "Traceback" not in err
    # serve --emulate measured the runtime's overhead and wrote nothing into the profile
    assert {p.name: p.read_bytes() for p in prof_dir.rglob("*") if p.is_file()} == before
    assert "not recorded" in err
