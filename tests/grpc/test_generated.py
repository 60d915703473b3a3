"""The committed gRPC code is exactly what ``scripts/gen_grpc.py`` generates from the committed ``.proto`` files
(grpcio-tools is in the dev extra), imports package-relative, and shares tritonclient's descriptors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "src" / "cascadeserve" / "grpc" / "protos"


def test_committed_code_is_what_the_script_generates(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_grpc.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    generated = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(p.name for p in PROTOS.iterdir() if "_pb2" in p.name)
    assert generated == committed
    for name in generated:
        assert (tmp_path / name).read_text(encoding="utf-8") == (PROTOS / name).read_text(encoding="utf-8"), name
    for name in ("grpc_service_pb2.py", "grpc_service_pb2_grpc.py", "grpc_service_pb2.pyi"):
        text = (PROTOS / name).read_text(encoding="utf-8")
        assert "\nimport model_config_pb2" not in text and "\nimport grpc_service_pb2" not in text


def test_the_messages_are_tritonclients_own() -> None:
    """Same file names and contents in protobuf's default pool: both register, and the classes are shared."""
    from tritonclient.grpc import service_pb2

    from cascadeserve.grpc.protos import grpc_service_pb2

    assert grpc_service_pb2.ModelInferRequest is service_pb2.ModelInferRequest
    assert grpc_service_pb2.DESCRIPTOR.name == "grpc_service.proto"
