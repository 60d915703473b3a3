"""``--plot PATH`` on ``profile frontier``, ``plan`` (and ``plan explain``) and ``bench``: the demo's three figures of
one's own profile, plan and served run, drawn into PNG files (the committed profile; bench against a real emulated
server on loopback)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest
from tests.cli_json import stdout_json
from tests.http.http_helpers import serving

from cascadeserve.cli import run
from cascadeserve.profile import Profile

REAL = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path, width: int, height: int) -> None:
    """A PNG file of this size in pixels (the figure's inches at 110 dpi), with something drawn in it."""
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert path.stat().st_size > 10_000
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (height, width)
    assert pixels[..., :3].min() < 0.5  # not a blank page: dark lines and text


def test_profile_frontier_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "frontier.png"
    assert run(["profile", "frontier", "--profile", str(REAL), "--json", "--plot", str(png)]) == 0
    out = stdout_json(capsys)
    assert out["plot"] == str(png) and len(out["frontier"]) == 13
    assert_png(png, 770, 495)  # 7 x 4.5 inches
    png.unlink()
    assert run(["profile", "frontier", "--profile", str(REAL), "--plot", str(png)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {png}"
    assert_png(png, 770, 495)


def test_plan_and_plan_explain_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "plan.json", tmp_path / "gear_plan.png"
    args = ["plan", "--profile", str(REAL), "--devices", "2", "--device-memory-mb", "4000", "--ranges", "2"]
    code = run([*args, "--slo-p95-ms", "20", "--max-qps", "1000", "--out", str(out), "--json", "--plot", str(png)])
    assert code == 0
    summary = stdout_json(capsys)
    assert summary["plot"] == str(png) and len(summary["gears"]) == 2
    assert_png(png, 880, 605)  # 8 x 5.5 inches
    again = tmp_path / "explained.png"
    assert run(["plan", "explain", "--plan", str(out), "--plot", str(again)]) == 0
    text = capsys.readouterr().out
    assert "QPS range" in text and text.splitlines()[-1] == f"wrote {again}"
    assert_png(again, 880, 605)


def test_bench_plot_draws_the_measured_timeline(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cascadeserve.profile import save_profile

    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    png = tmp_path / "timeline.png"
    with serving(toy_profile) as server:
        args = ["bench", "--url", server.url, "--name", "toy", "--trace", "synthetic:constant:qps=100,duration=2"]
        assert run([*args, "--profile", str(prof_dir), "--json", "--plot", str(png)]) == 0
        out = stdout_json(capsys)
        assert out["sent"] == out["ok"] == 200 and out["plot"] == str(png)
    assert_png(png, 990, 880)  # four panels, accuracy among them (the profile's labels): 9 x 8 inches
    assert out["accuracy"] is not None


def test_bench_counts_the_shed_requests_and_plots_them_against_the_servers_slo(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    from cascadeserve.eval import run_figures
    from cascadeserve.profile import save_profile
    from cascadeserve.runtime import RuntimeOptions

    drawn: list[dict[str, object]] = []
    plot = run_figures.plot_timeline

    def spy(run: run_figures.RequestLog, path: Path, **kw: object) -> Path:
        drawn.append({"shed": int(run.shed.sum()), **kw})  # type: ignore[attr-defined]
        return plot(run, path, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(run_figures, "plot_timeline", spy)
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    png = tmp_path / "timeline.png"
    options = RuntimeOptions(max_in_flight=2, slo_ms=50.0)  # admits 2 at a time: 300 QPS sheds most
    with serving(toy_profile, runtime_options=options) as server:
        args = ["bench", "--url", server.url, "--name", "toy", "--trace", "synthetic:constant:qps=300,duration=1"]
        args += ["--profile", str(prof_dir)]
        assert run([*args, "--json", "--plot", str(png)]) == 0
        out = stdout_json(capsys)
        assert run(args) == 0
        text = capsys.readouterr().out
    assert out["shed"] > 0 and out["ok"] + out["shed"] == out["sent"] == 300
    assert out["shed_pct"] == round(100.0 * out["shed"] / 300, 2)
    assert list(out).index("shed_pct") == list(out).index("shed") + 1
    (fig,) = drawn
    assert fig["slo_ms"] == pytest.approx(50.0) and fig["shed"] == out["shed"]  # the server's SLO, read from /metrics
    assert_png(png, 990, 880)
    got = re.search(r"^\s+shed: (\d+) \(([\d.]+) % of 300 sent\)$", text, re.MULTILINE)
    assert got is not None and float(got.group(2)) == round(100.0 * int(got.group(1)) / 300, 2), text
    assert "shed_pct" not in text
