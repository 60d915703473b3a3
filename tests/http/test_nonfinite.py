"""Nothing hangs, nothing leaks: NaN/Inf/1e39 inputs, models that raise or return garbage, over real HTTP.

Each case ends with the same check: the runtime holds nothing in flight and a good request is answered at once.
A non-finite input is refused with 400 naming the input (unless the model config accepts such values, when the
last stage answers whatever its certainty); a model that raises or returns NaN scores fails only its own rows
with 500 naming the model, or, where an earlier stage ran, those rows get that stage's answer, flagged.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable

import httpx
import numpy as np
import pytest
from tests.http.http_helpers import serving

from cascadeserve.http import Server
from cascadeserve.profile import Profile
from cascadeserve.runtime import InputSpec, LocalBackend, ModelConfig


def _m0(batch: np.ndarray) -> np.ndarray:
    """Probabilities: sure (margin 0.85) when x0 > 0.5, unsure (0.05) otherwise; a NaN x0 gives NaN scores."""
    x = batch[:, :1].astype(np.float64)
    sure = np.where(x > 0.5, 1.0, 0.0)
    return sure * np.array([0.9, 0.05, 0.05]) + (1 - sure) * np.array([0.4, 0.35, 0.25]) + 0.0 * x


def _m1(batch: np.ndarray) -> np.ndarray:
    return np.tile([0.1, 0.2, 0.7], (len(batch), 1))


def _config(
    m0: Callable[[np.ndarray], np.ndarray] = _m0, m1: Callable[[np.ndarray], np.ndarray] = _m1, *, allow: bool = False
) -> ModelConfig:
    return ModelConfig({"m0": m0, "m1": m1}, InputSpec("input", "FP32", (-1, 2), allow_non_finite=allow))


def _json_body(rows: list[list[float]]) -> bytes:
    # Python's json writes NaN and Infinity (as many clients do); 1e39 is plain JSON that overflows FP32.
    return json.dumps(
        {"inputs": [{"name": "input", "datatype": "FP32", "shape": [len(rows), 2], "data": rows}]}
    ).encode()


def _post(server: Server, rows: list[list[float]], *, binary: bool = False) -> httpx.Response:
    url = f"{server.url}/v2/models/toy/infer"
    if not binary:
        return httpx.post(url, content=_json_body(rows), headers={"content-type": "application/json"}, timeout=20)
    with np.errstate(over="ignore"):
        blob = np.asarray(rows, dtype=np.float32).tobytes()
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "datatype": "FP32",
                    "shape": [len(rows), 2],
                    "parameters": {"binary_data_size": len(blob)},
                }
            ]
        }
    ).encode()
    return httpx.post(url, content=head + blob, headers={"Inference-Header-Content-Length": str(len(head))}, timeout=20)


def _settled(server: Server) -> None:
    """In flight back to 0, and a good request answered at once."""
    good = _post(server, [[0.9, 0.0]])
    assert good.status_code == 200, good.text
    assert server.app.runtime.in_flight == 0


BAD_ROWS = {
    "nan": [[float("nan"), 0.0]],
    "inf": [[0.0, float("inf")]],
    "-inf": [[float("-inf"), 0.0]],
    "1e39": [[1e39, 0.0]],
    "mixed": [[0.9, 0.0], [0.2, 0.1], [float("nan"), 0.0], [0.7, 1e39]],
}


@pytest.mark.parametrize("binary", [False, True])
def test_non_finite_inputs_are_refused_with_400_naming_the_input(toy_profile: Profile, binary: bool) -> None:
    with serving(toy_profile, models=_config(), backend=LocalBackend()) as server:
        for case, rows in BAD_ROWS.items():
            if binary and case == "1e39":
                continue  # binary FP32 cannot carry 1e39; Inf covers it
            r = _post(server, rows, binary=binary)
            assert r.status_code == 400, (case, r.text)
            err = r.json()["error"]
            assert "'input'" in err and "non-finite" in err, err
            assert f"row {2 if case == 'mixed' else 0}" in err
        _settled(server)


def _logged(caplog: pytest.LogCaptureFixture, r: object, says: str) -> bool:
    """The client's 500 names the model and a request id; the reason (``says``) is only in the server log, under
    that id."""
    err = r.json()["error"]  # type: ignore[attr-defined]
    rid = err.split("request id ", 1)[1].split(";", 1)[0]
    return "'m0'" in err and says not in err and any(rid in m and says in m for m in caplog.messages)


def test_a_model_that_accepts_non_finite_values_is_answered_by_the_last_stage(
    toy_profile: Profile, caplog: pytest.LogCaptureFixture
) -> None:
    # m0 turns NaN into NaN scores: garbage, so those rows fail at m0 (no earlier stage ran); a model that copes
    # (m0 here maps NaN to a finite, unsure score) sends them on, and the last stage answers them all.
    def coping_m0(batch: np.ndarray) -> np.ndarray:
        return _m0(np.nan_to_num(batch, nan=0.0, posinf=0.0, neginf=0.0))

    with serving(toy_profile, models=_config(coping_m0, allow=True), backend=LocalBackend()) as server:
        r = _post(server, BAD_ROWS["mixed"])
        assert r.status_code == 200, r.text
        out = {o["name"]: o["data"] for o in r.json()["outputs"]}
        assert out["model"] == ["m0", "m1", "m1", "m0"]
        _settled(server)
    with serving(toy_profile, models=_config(allow=True), backend=LocalBackend()) as server:
        r = _post(server, [[float("nan"), 0.0]])
        assert r.status_code == 500 and _logged(caplog, r, "non-finite")
        _settled(server)


def test_a_model_that_raises_fails_only_its_own_requests(
    toy_profile: Profile, caplog: pytest.LogCaptureFixture
) -> None:
    def raising_m0(batch: np.ndarray) -> np.ndarray:
        if np.any(batch[:, 1] < 0):
            raise RuntimeError("boom")
        return _m0(batch)

    with serving(toy_profile, models=_config(raising_m0), backend=LocalBackend()) as server:
        bad = _post(server, [[0.9, -1.0], [0.2, -1.0]])
        assert bad.status_code == 500 and _logged(caplog, bad, "boom")
        _settled(server)


@pytest.mark.parametrize("garbage", ["nan", "shape", "raise"])
def test_a_failing_later_stage_answers_from_the_earlier_stage_flagged(toy_profile: Profile, garbage: str) -> None:
    def bad_m1(batch: np.ndarray) -> np.ndarray:
        if garbage == "nan":
            return np.full((len(batch), 3), np.nan)
        if garbage == "shape":
            return np.zeros((len(batch) + 1, 3))
        raise ValueError("m1 is broken")

    with serving(toy_profile, models=_config(m1=bad_m1), backend=LocalBackend()) as server:
        r = _post(server, [[0.2, 0.0]])  # unsure at m0: m1 runs and fails, m0's answer stands, flagged
        assert r.status_code == 200, r.text
        body = r.json()
        out = {o["name"]: o["data"] for o in body["outputs"]}
        assert out["model"] == ["m0"] and body["parameters"]["fallback"] is True
        sure = _post(server, [[0.9, 0.0]])  # answered by m0 alone: not flagged
        assert sure.status_code == 200 and sure.json()["parameters"]["fallback"] is False
        assert server.app.runtime.in_flight == 0


def test_nan_scores_at_the_first_stage_give_500_naming_the_model(
    toy_profile: Profile, caplog: pytest.LogCaptureFixture
) -> None:
    def nan_m0(batch: np.ndarray) -> np.ndarray:
        s = _m0(batch)
        s[batch[:, 1] > 0] = np.nan  # only the rows with x1 > 0 come out as garbage
        return s

    with serving(toy_profile, models=_config(nan_m0), backend=LocalBackend()) as server:
        r = _post(server, [[0.9, 0.5]])
        assert r.status_code == 500 and _logged(caplog, r, "non-finite")
        ok = _post(server, [[0.9, 0.0], [0.2, 0.0]])
        assert ok.status_code == 200
        _settled(server)


def test_binary_tensor_with_trailing_bytes_is_refused(toy_profile: Profile) -> None:
    with serving(toy_profile, models=_config(), backend=LocalBackend()) as server:
        blob = np.zeros((1, 2), dtype=np.float32).tobytes()
        head = json.dumps(
            {
                "inputs": [
                    {
                        "name": "input",
                        "datatype": "FP32",
                        "shape": [1, 2],
                        "parameters": {"binary_data_size": len(blob)},
                    }
                ]
            }
        ).encode()
        r = httpx.post(
            f"{server.url}/v2/models/toy/infer",
            content=head + blob + struct.pack("<I", 7),
            headers={"Inference-Header-Content-Length": str(len(head))},
            timeout=20,
        )
        assert r.status_code == 400 and "4 bytes after the last binary tensor" in r.json()["error"]
        _settled(server)
