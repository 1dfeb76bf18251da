"""Regenerates protocol/swarm_pb2.py from protocol/swarm.proto (needs grpcio-tools).

    python -m protocol.build
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def generate(out_dir: Path) -> Path:
    """Runs protoc on swarm.proto into out_dir; returns the generated module's path."""
    from grpc_tools import protoc

    code = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out_dir}", str(HERE / "swarm.proto")])
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    return out_dir / "swarm_pb2.py"


if __name__ == "__main__":
    print(generate(HERE))
    sys.exit(0)
