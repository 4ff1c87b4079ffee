"""Regenerate et_def_pb2.py (and its .pyi stub) from et_def.proto.

Run from anywhere, with the dev extra installed (it brings grpcio-tools, which ships protoc):

    python -m chakra_core.format.schema.regenerate           # rewrite the generated files
    python -m chakra_core.format.schema.regenerate --check   # exit 1 if they are stale

The generated files are committed so that users need no protoc; tests/test_schema.py runs
the --check form so that the .proto and the generated code cannot drift apart.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent
PROTO_NAME = "et_def.proto"
GENERATED = ("et_def_pb2.py", "et_def_pb2.pyi")


def generate_into(out_dir: Path) -> None:
    """Run protoc (from grpcio-tools) on et_def.proto, writing the Python code into out_dir."""
    from grpc_tools import protoc  # dev-only dependency

    args = [
        "protoc",
        f"--proto_path={SCHEMA_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        str(SCHEMA_DIR / PROTO_NAME),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {SCHEMA_DIR / PROTO_NAME}")


def stale_files() -> list[str]:
    """Names of committed generated files that differ from a fresh protoc run."""
    with tempfile.TemporaryDirectory() as tmp:
        generate_into(Path(tmp))
        return [
            name
            for name in GENERATED
            if (Path(tmp) / name).read_bytes() != (SCHEMA_DIR / name).read_bytes()
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale generated files")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        if stale:
            print(f"stale generated code: {', '.join(stale)}; run python -m chakra_core.format.schema.regenerate")
            return 1
        print("generated code matches et_def.proto")
        return 0
    generate_into(SCHEMA_DIR)
    print(f"regenerated {', '.join(GENERATED)} in {SCHEMA_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
