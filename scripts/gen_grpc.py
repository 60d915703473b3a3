"""Regenerate the gRPC Python code of ``src/cascadeserve/grpc/protos`` from Triton's ``.proto`` files there.

Usage: ``python scripts/gen_grpc.py [--out DIR]`` (needs grpcio-tools, in the ``dev`` extra; the default ``--out``
is the protos folder itself). ``tests/grpc/test_generated.py`` runs it into a temporary folder and checks that the
committed files are exactly what it writes.

Two choices are deliberate:

* protoc runs with ``-I`` at the protos folder, so the descriptors keep Triton's file names (``grpc_service.proto``,
  ``model_config.proto``). tritonclient registers the very same files in protobuf's default descriptor pool; a
  process that imports both (a test, a benchmark) works only because the names and contents match. Under another
  ``-I`` layout (``cascadeserve/grpc/protos/grpc_service.proto``) the pool would refuse the second registration of
  every ``inference.*`` symbol.
* protoc then writes top-level imports (``import model_config_pb2``) that resolve only with the folder on
  ``sys.path``; the post-processing below makes them package-relative (``from . import model_config_pb2``).
  ``model_config_pb2_grpc.py`` (no service in that file) is not kept.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

PROTOS = Path(__file__).resolve().parents[1] / "src" / "cascadeserve" / "grpc" / "protos"
SOURCES = ("grpc_service.proto", "model_config.proto")
KEPT = (
    "grpc_service_pb2.py",
    "grpc_service_pb2.pyi",
    "grpc_service_pb2_grpc.py",
    "model_config_pb2.py",
    "model_config_pb2.pyi",
)
# `import model_config_pb2 as model__config__pb2` -> `from . import model_config_pb2 as model__config__pb2`
_TOP_LEVEL = re.compile(r"^import (grpc_service_pb2|model_config_pb2) as (\w+)$", re.M)


def generate(out: Path) -> list[Path]:
    """Write the generated modules into ``out``; returns their paths."""
    from grpc_tools import protoc  # dev only: the runtime needs grpcio and protobuf, not the compiler

    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTOS}", f"--python_out={tmp}", f"--pyi_out={tmp}", f"--grpc_python_out={tmp}"]
        if protoc.main([*args, *(str(PROTOS / s) for s in SOURCES)]) != 0:
            raise SystemExit("protoc failed (see above)")
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in KEPT:
            text = (Path(tmp) / name).read_text(encoding="utf-8")
            (out / name).write_text(_TOP_LEVEL.sub(r"from . import \1 as \2", text), encoding="utf-8")
            written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PROTOS, help="folder to write into (default: %(default)s)")
    out = parser.parse_args(argv).out
    for path in generate(out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
