"""Regenerates the generated modules of protocol/*.proto (needs grpcio-tools): swarm_pb2.py, control_pb2.py
and control_pb2_grpc.py.

    python -m protocol.build
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


PROTOS = ("swarm.proto", "control.proto")


def generate(out_dir: Path) -> None:
    """Runs protoc (with the gRPC plugin) on every .proto into out_dir."""
    from grpc_tools import protoc

    for proto in PROTOS:
        code = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                            str(HERE / proto)])
        if code != 0:
            raise RuntimeError(f"protoc failed on {proto} with exit code {code}")
    (out_dir / "swarm_pb2_grpc.py").unlink(missing_ok=True)  # swarm.proto has no service
    fix_grpc_import(out_dir / "control_pb2_grpc.py")


def fix_grpc_import(path: Path) -> None:
    """protoc writes `import control_pb2`; inside this package it must be relative."""
    text = path.read_text()
    path.write_text(text.replace("import control_pb2 as", "from . import control_pb2 as"))


if __name__ == "__main__":
    generate(HERE)
    print("regenerated", ", ".join(PROTOS))
    sys.exit(0)
