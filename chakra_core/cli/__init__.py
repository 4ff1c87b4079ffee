"""The `chakra` command.

Every path argument is an fsspec URL (a local path, file://, memory://, s3://...; gzip is
detected on read). Exit status: 0 success, 1 validation findings, 2 bad input or usage.
Bad input is reported as one line on stderr, never as a traceback (set CHAKRA_DEBUG=1 to
see one).

One module per command group, each with COMMANDS (its commands' names and one-line helps),
`add_parsers(subparsers)` and the cmd_* functions; common.py holds what they share. Start-up
is kept to what the command uses (tests/benchmarks/bench_startup.py): a group module imports
the library inside its functions, and only the group of the command given registers its
parsers (which can import, as the viz group's do); the other commands are listed by name and
help alone, all that `chakra --help` and an unknown command's error show.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from chakra_core.cli import convert, diff, files, fleet, replay, simulate, stats, stragglers, viz, warehouse
from chakra_core.cli.common import EXIT_BAD_INPUT, EXIT_OK
from chakra_core.errors import ChakraError
from chakra_core.terminal import printable

# in the order `chakra --help` lists their commands
GROUPS = (files, simulate, stats, stragglers, warehouse, diff, viz, convert, fleet, replay)


class _VersionAction(argparse.Action):
    """--version, looked up only when asked for: reading the package metadata costs every
    other command ~25 ms of start-up."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = f"chakra-fleet {version('chakra-fleet')}"
        except PackageNotFoundError:  # run from a source tree that was never installed
            text = "chakra-fleet (not installed)"
        print(text)
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr, exit 2, as bad input is (--help shows the usage)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with every option of the group of `command` (when it names one) and the
    other commands by name and help only."""
    parser = _Parser(
        prog="chakra",
        description="Read, check and convert Chakra execution traces (.et). Paths may be any fsspec URL "
        "(local, file://, s3://, memory://); gzip input is detected automatically.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        if command in group.COMMANDS:
            group.add_parsers(sub)
        else:
            for name, text in group.COMMANDS.items():
                sub.add_parser(name, help=text)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The command word: the top-level options take no value, so it is the first word."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _run_guarded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace, command: str) -> int:
    try:
        return run(args)
    except ChakraError as exc:
        print(f"chakra {command}: {printable(str(exc))}", file=sys.stderr)
    except BrokenPipeError:  # e.g. `chakra info --json x.et | head`: the reader left, nothing to say
        raise
    except (OSError, ValueError) as exc:
        if os.environ.get("CHAKRA_DEBUG"):
            raise
        print(f"chakra {command}: {type(exc).__name__}: {printable(str(exc))}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"chakra {command}: interrupted", file=sys.stderr)
    return EXIT_BAD_INPUT


def configure_arrow_memory() -> None:
    """The `chakra` process allocates Arrow buffers with jemalloc, which hands freed memory
    back sooner than pyarrow's default mimalloc: converting the ResNet trace peaks at 2.7x
    its JSON instead of 4.5x (tests/benchmarks/bench_convert.py). ARROW_DEFAULT_MEMORY_POOL,
    when set, wins; so does a build without jemalloc."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # pyarrow built without jemalloc
        pass


MMAP_THRESHOLD_BYTES = 128 << 10  # glibc's initial value


def configure_malloc() -> None:
    """Keeps glibc's malloc handing every block of 128 KiB or more back to the system when it is
    freed. glibc raises that threshold to the size of each large block freed (up to 32 MiB), after
    which the analyses' many short-lived numpy arrays of a big trace come from the heap and stay
    resident: `chakra simulate` of a 1.2 M-node trace held 626 MB instead of 466 MB after its run
    (tests/benchmarks/bench_big_analysis.py). Setting the threshold turns that adjustment off.
    MALLOC_MMAP_THRESHOLD_, when set, wins; elsewhere than glibc nothing is done."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return
    from chakra_core.cli.heap import M_MMAP_THRESHOLD, mallopt

    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def configure_blas_threads() -> None:
    """One OpenBLAS thread, unless OPENBLAS_NUM_THREADS says otherwise. numpy's OpenBLAS starts a
    thread per core when numpy is imported, and each spins about 0.1 s of CPU before it sleeps;
    no command does linear algebra that needs them, so every command paid that for nothing
    (issue 40's conversion: 5.16 -> 5.01 CPU s at K = 37). It must be set before numpy is
    imported: `chakra`'s modules import it only inside the commands."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> int:
    configure_blas_threads()
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command_in(argv)).parse_args(argv)
    configure_malloc()
    configure_arrow_memory()
    try:
        return _run_guarded(args.run, args, args.command)
    except BrokenPipeError:
        sys.stderr.close()  # no second complaint from the interpreter at exit
        return EXIT_OK
