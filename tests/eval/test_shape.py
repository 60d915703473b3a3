"""The workload a comparison replays: the paper's shape on the Twitter trace, the user's choices everywhere."""

from __future__ import annotations

from cascadeserve.cli import run
from cascadeserve.eval.shape import PAPER_MAX_QPS, PAPER_WINDOW, is_twitter_trace, workload_shape

TWITTER = "../shared/data/traces/twitter_2021/tweets_per_second.txt"


def _shape(trace: str, **given: object) -> object:
    opts: dict[str, object] = {"window": None, "drop_zero": None, "max_qps": None, "capacity_devices": None}
    opts.update(given)
    return workload_shape(trace, **opts)  # type: ignore[arg-type]


def test_the_twitter_trace_gets_the_papers_shape() -> None:
    s = workload_shape(TWITTER, window=None, drop_zero=None, max_qps=None, capacity_devices=None)
    assert (s.window, s.drop_zero, s.max_qps, s.family_scaled) == (PAPER_WINDOW, True, PAPER_MAX_QPS, False)
    assert (PAPER_WINDOW, PAPER_MAX_QPS) == ("0:1200", 7600.0)
    assert "paper" in s.window_why and "paper" in s.drop_zero_why and "paper" in s.peak_why
    assert s.describe(5_800_000, 7600.0) == (
        "workload: window 0:1200 s (the paper's default for the Twitter trace, §6.1), zero seconds dropped (the "
        "paper's default for the Twitter trace, §6.1), peak 7600 QPS (the paper's default for the Twitter trace, "
        "§6.1); every system replays all 5,800,000 requests, nothing shortened"
    )


def test_what_the_user_gives_wins_on_the_twitter_trace() -> None:
    s = workload_shape(TWITTER, window="0:60", drop_zero=False, max_qps=None, capacity_devices=4)
    assert (s.window, s.drop_zero, s.max_qps, s.family_scaled, s.capacity_devices) == ("0:60", False, None, True, 4)
    assert s.window_why == "given" and s.drop_zero_why == "given" and "--capacity-devices 4 (given)" in s.peak_why
    p = workload_shape(TWITTER, window=None, drop_zero=None, max_qps=18911.0, capacity_devices=2)
    assert p.max_qps == 18911.0 and p.peak_why == "--max-qps 18911 given" and p.window == PAPER_WINDOW


def test_other_traces_are_taken_whole_and_scaled_to_the_family() -> None:
    assert not is_twitter_trace("traces/azure.csv") and not is_twitter_trace("synthetic:poisson:qps=5,duration=1")
    s = workload_shape("traces/azure.csv", window=None, drop_zero=None, max_qps=None, capacity_devices=None)
    assert (s.window, s.drop_zero, s.max_qps, s.family_scaled, s.capacity_devices) == (None, False, None, True, 4)
    assert s.describe().startswith("workload: the whole trace (no --window given), zero seconds kept")
    syn = "synthetic:poisson:qps=5,duration=1"
    own = workload_shape(syn, window=None, drop_zero=None, max_qps=None, capacity_devices=None)
    assert own.max_qps is None and not own.family_scaled and own.peak_why == "the synthetic trace at its own rate"
    rep = workload_shape(syn, window=None, drop_zero=None, max_qps=None, capacity_devices=None, scale_synthetic=True)
    assert rep.family_scaled


def test_help_states_the_defaults(capsys: object) -> None:
    for cmd in ("compare", "report"):
        assert run([cmd, "--help"]) == 0
        raw = capsys.readouterr().out  # type: ignore[attr-defined]
        out = " ".join(raw.replace("│", " ").split())  # rich boxes and wraps the help
        for words in ("tweets_per_second.txt", "0:1200", "7,600", "--keep-zero", "Nothing else shortens"):
            assert words in out, (cmd, words)
