"""Triton's logging and trace settings APIs over a real server, HTTP (tritonclient.http and plain JSON) and gRPC
(tritonclient.grpc): the log settings change what the server's loggers write to stderr and how; trace settings are
kept and answered with Triton's fields, but tracing stays OFF (turning it on is a 400 saying it is not built in);
changes need the admin token; bad settings are refused naming them; the server metadata lists the extensions
served, the same on both protocols."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import grpc
import httpx
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tests.grpc.grpc_helpers import client as grpc_client
from tests.grpc.grpc_helpers import grpc_serving
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, serving

from cascadeserve.http import Server
from cascadeserve.http.logsettings import LOG
from cascadeserve.http.shared import EXTENSIONS
from cascadeserve.profile import Profile

GRPC_ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
DEFAULT_LOG = {
    "log_file": "",
    "log_info": False,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}
DEFAULT_TRACE = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}
ISO_LINE = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ %s \d+ [\w.]+:\d+\] %s"


@pytest.fixture(scope="module")
def server(toy_profile: Profile) -> Iterator[Server]:
    with grpc_serving(toy_profile) as s:
        yield s


@pytest.fixture()
def log_defaults() -> Iterator[None]:
    """The log settings are the process's: each test that changes them leaves them as it found them."""
    LOG.update({k: v for k, v in DEFAULT_LOG.items() if k != "log_file"})
    yield
    LOG.update({k: v for k, v in DEFAULT_LOG.items() if k != "log_file"})


def _post(server: Server, path: str, body: object, headers: dict[str, str] | None = ADMIN) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=headers)


def test_log_settings_change_what_the_server_writes(
    server: Server, log_defaults: None, capsys: pytest.CaptureFixture[str]
) -> None:
    http = th.InferenceServerClient(server.url.removeprefix("http://"))
    assert http.get_log_settings() == DEFAULT_LOG
    probe = logging.getLogger("cascadeserve.http")  # a logger of the server's, in this process
    probe.info("info one")
    probe.warning("warning one")
    assert capsys.readouterr().err == "warning one\n"  # the defaults: warnings and errors, the message alone

    answer = http.update_log_settings({"log_info": True, "log_format": "ISO8601"}, headers=ADMIN)
    assert answer == {**DEFAULT_LOG, "log_info": True, "log_format": "ISO8601"}
    probe.info("info two")
    probe.debug("debug two")
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(ISO_LINE % ("I", "log settings changed: log_info=True, log_format='ISO8601'"), lines[0])
    assert re.fullmatch(ISO_LINE % ("I", "info two"), lines[1]) and len(lines) == 2

    http.update_log_settings({"log_warning": False, "log_verbose_level": 1, "log_format": "default"}, headers=ADMIN)
    capsys.readouterr()
    probe.debug("debug three")
    probe.warning("warning three")
    probe.error("error three")
    assert capsys.readouterr().err == "debug three\nerror three\n"

    grpc = grpc_client(server)  # the same settings over gRPC, and a change there shows over HTTP
    got = grpc.get_log_settings(as_json=True)["settings"]
    assert got["log_verbose_level"] == {"uint32_param": 1} and got["log_warning"] == {"bool_param": False}
    grpc.update_log_settings({"log_error": False, "log_verbose_level": 0}, headers=GRPC_ADMIN)
    assert http.get_log_settings()["log_error"] is False
    probe.error("error four")
    assert "error four" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"log_verbose_level": -1}, "log_verbose_level: expected an integer from 0, got -1"),
        ({"log_info": "false"}, "log_info: expected true or false, got 'false'"),
        ({"log_format": "json"}, "log_format: expected one of default, ISO8601, got 'json'"),
        ({"log_file": "/tmp/x.log"}, "log_file: cannot be changed over the network (the server writes to stderr)"),
        ({"log_level": 1}, "log_level: not a log setting"),
        ([1], "body: expected a JSON object of settings"),
    ],
)
def test_bad_log_settings_are_refused_naming_them(server: Server, log_defaults: None, body: object, says: str) -> None:
    r = _post(server, "/v2/logging", body)
    assert r.status_code == 400 and r.json()["error"].startswith(says), r.text
    assert httpx.get(f"{server.url}/v2/logging").json() == DEFAULT_LOG  # nothing changed


def test_changes_need_the_admin_token(server: Server, toy_profile: Profile) -> None:
    for path, body in (("/v2/logging", {"log_info": True}), ("/v2/trace/setting", {"trace_rate": "3"})):
        assert _post(server, path, body, headers=None).status_code == 401
        assert _post(server, path, body, headers={"Authorization": "Bearer nope"}).status_code == 403
    with pytest.raises(tg.InferenceServerException) as e:
        grpc_client(server).update_log_settings({"log_info": True})
    assert e.value.status() == "StatusCode.UNAUTHENTICATED"
    assert httpx.get(f"{server.url}/v2/logging").json()["log_info"] is False
    with serving(toy_profile, admin_token=None) as fixed:
        r = _post(fixed, "/v2/logging", {"log_info": True}, headers=None)
        assert r.status_code == 403 and "--admin-token" in r.json()["error"]
        assert httpx.get(f"{fixed.url}/v2/trace/setting").json() == DEFAULT_TRACE  # reading needs no token


def test_trace_settings_are_kept_per_server_and_model(server: Server) -> None:
    http = th.InferenceServerClient(server.url.removeprefix("http://"))
    assert http.get_trace_settings() == DEFAULT_TRACE
    assert http.get_trace_settings(model_name="toy") == DEFAULT_TRACE
    answer = http.update_trace_settings(settings={"trace_rate": "5", "trace_count": "10"}, headers=ADMIN)
    assert answer == {**DEFAULT_TRACE, "trace_rate": "5", "trace_count": "10"}
    http.update_trace_settings(model_name="toy", settings={"trace_rate": "2", "log_frequency": 7}, headers=ADMIN)
    assert http.get_trace_settings(model_name="toy")["trace_rate"] == "2"
    assert http.get_trace_settings(model_name="toy")["log_frequency"] == "7"
    assert http.get_trace_settings()["trace_rate"] == "5"  # the server's own are untouched
    grpc = grpc_client(server)
    got = grpc.get_trace_settings(model_name="toy", as_json=True)["settings"]
    assert got["trace_rate"] == {"value": ["2"]} and got["trace_level"] == {"value": ["OFF"]}
    grpc.update_trace_settings(model_name="toy", settings={"trace_rate": None}, headers=GRPC_ADMIN)  # cleared
    assert http.get_trace_settings(model_name="toy")["trace_rate"] == "5"  # the server's again
    http.update_trace_settings(settings={"trace_rate": None, "trace_count": None}, headers=ADMIN)
    http.update_trace_settings(model_name="toy", settings={"log_frequency": None}, headers=ADMIN)
    assert http.get_trace_settings() == http.get_trace_settings(model_name="toy") == DEFAULT_TRACE


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"trace_level": ["TIMESTAMPS"]}, "trace_level: this server does not trace requests (tracing is not built in)"),
        ({"trace_level": ["OFF", "TENSORS"]}, 'trace_level: "OFF" comes alone'),
        ({"trace_level": "OFF"}, "trace_level: expected a list of levels"),
        ({"trace_rate": "-1"}, "trace_rate: expected an integer from 0 to 4294967295 (as a string), got '-1'"),
        ({"trace_count": "-2"}, "trace_count: expected an integer from -1"),
        ({"log_frequency": "often"}, "log_frequency: expected an integer from 0"),
        ({"trace_file": "/tmp/trace.json"}, "trace_file: cannot be changed over the network"),
        ({"trace_mode": "opentelemetry"}, "trace_mode: cannot be changed over the network"),
        ({"trace_rates": "1"}, "trace_rates: not a trace setting"),
    ],
)
def test_bad_trace_settings_are_refused_naming_them(server: Server, body: object, says: str) -> None:
    for path in ("/v2/trace/setting", "/v2/models/toy/trace/setting"):
        r = _post(server, path, body)
        assert r.status_code == 400 and r.json()["error"].startswith(says), r.text
    assert httpx.get(f"{server.url}/v2/trace/setting").json() == DEFAULT_TRACE


def test_tracing_cannot_be_turned_on_over_grpc_and_unknown_models_are_404(server: Server) -> None:
    with pytest.raises(tg.InferenceServerException) as e:
        grpc_client(server).update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}, headers=GRPC_ADMIN)
    assert e.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    assert "does not trace requests" in e.value.message()
    assert httpx.get(f"{server.url}/v2/models/nope/trace/setting").status_code == 404
    with pytest.raises(tg.InferenceServerException) as e:
        grpc_client(server).get_trace_settings(model_name="nope")
    assert e.value.status() == str(grpc.StatusCode.NOT_FOUND)


def test_server_metadata_lists_the_extensions_served(server: Server) -> None:
    http = httpx.get(f"{server.url}/v2").json()["extensions"]
    grpc = grpc_client(server).get_server_metadata(as_json=True)["extensions"]
    assert http == grpc == list(EXTENSIONS)
    assert {"classification", "logging", "statistics", "model_repository", "model_configuration"} <= set(http)
    assert "trace" not in http and "cuda_shared_memory" not in http
