"""Generate the Python protobuf/gRPC modules from ``proto/`` (run during setup).

The generated code is written into each package that speaks the wire API
(``edgepath.wire`` in the service, ``edgepath_agent.wire`` in the agent); it is
always produced from the ``.proto`` files, never edited. The service's copy is
ignored by git. The agent's copy is committed, so that the agent's wheel builds
with setuptools alone on a device (no grpcio-tools, which has no wheels for many
router architectures); tests/agent/test_agent_package.py regenerates it with the
pinned grpcio-tools and fails when the committed files differ.

protoc's Python plugins emit absolute imports that follow the proto package
path (``from edgepath.v1 import edgepath_pb2``), a long-standing limitation
(grpc/grpc#9575, protocolbuffers/protobuf#1491). Because the generated modules
live inside our packages, this script rewrites exactly that import prefix into
a relative import after generation. Nothing else in the output is touched.

Usage: ``python proto/generate.py`` (needs grpcio-tools).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
TARGETS = [
    ROOT / "service" / "src" / "edgepath" / "wire",
    ROOT / "client-agent" / "src" / "edgepath_agent" / "wire",
]
_IMPORT = re.compile(r"^from edgepath\.v1 import ", re.MULTILINE)


def generate(target: Path) -> list[Path]:
    """Run protoc for every ``proto/edgepath/v1/*.proto`` into ``target``.

    Returns the generated files. Raises ``RuntimeError`` when protoc fails.
    """
    protos = sorted((PROTO_ROOT / "edgepath" / "v1").glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    staging = target / "_staging"
    staging.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={staging}",
        f"--pyi_out={staging}",
        f"--grpc_python_out={staging}",
        *[str(p.relative_to(PROTO_ROOT)) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed for {target}")
    produced = []
    for src in sorted((staging / "edgepath" / "v1").iterdir()):
        dst = target / src.name
        dst.write_text(_IMPORT.sub("from . import ", src.read_text()))
        produced.append(dst)
    (target / "__init__.py").write_text('"""Generated from proto/edgepath/v1 by proto/generate.py. Do not edit."""\n')
    for p in sorted(staging.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    staging.rmdir()
    return produced


def main() -> int:
    for target in TARGETS:
        files = generate(target)
        print(f"generated {len(files)} files in {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
