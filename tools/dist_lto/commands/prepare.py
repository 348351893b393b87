"""`dist-lto prepare`: an archive becomes a directory of objects plus a manifest.

The command line only; the work is `archive/prepare.py`'s.
"""

from __future__ import annotations

from dist_lto import TYPE_CHECKING
from dist_lto.archive.prepare import prepare
from dist_lto.cli import parse, scan

if TYPE_CHECKING:
    import argparse


class Options:
    """The parsed command line."""

    __slots__ = ("archive", "manifest_out", "objects_out")

    def __init__(self) -> None:
        self.archive = ""
        self.objects_out = ""
        self.manifest_out = ""


_VALUE_OPTIONS = {"--archive": "archive", "--objects-out": "objects_out",
                  "--manifest-out": "manifest_out"}  # fmt: skip


def _parse_fast(argv: list[str]) -> Options | None:
    """The usual command line without argparse (a build runs prepare once per archive);
    None sends anything else to argparse."""
    opts = Options()
    positional = scan(argv, opts, _VALUE_OPTIONS, {})
    if positional != [] or not (opts.archive and opts.objects_out and opts.manifest_out):
        return None
    return opts


def _parser() -> argparse.ArgumentParser:
    """The argparse parser: the reference for `--help` and for error messages."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="dist-lto prepare",
        description=(
            "Turn an ar archive into a directory of objects plus a JSON manifest, so the ThinLTO"
            " index step can see each member as an object. Regular archives (GNU, BSD, as"
            " llvm-ar, GNU ar and rustc write them) are read with libarchive and every member"
            " is extracted; duplicate names get distinct extracted names (foo.o, foo~2.o) that"
            " never collide with another member's own name. Thin archives are not copied: the"
            " manifest points at each member where it is. Bitcode is told from native code by"
            " its magic."
        ),
        epilog=(
            "The manifest (version 1) is specified in docs/prepare.md. Exit status: 0 success,"
            " 2 bad input (not an archive, truncated, unsafe or non-UTF-8 member name, symlink"
            " or device member, missing thin member, non-empty objects directory), 1 internal"
            " failure. On failure no manifest is written and nothing is left in the objects"
            " directory."
        ),
    )
    parser.add_argument("--archive", required=True, metavar="A", help="the archive to prepare")
    parser.add_argument(
        "--objects-out",
        required=True,
        metavar="DIR",
        help="directory for the extracted members; created if missing, must be empty"
        " (left empty for a thin archive)",
    )
    parser.add_argument(
        "--manifest-out",
        required=True,
        metavar="M.json",
        help="where to write the manifest; member paths in it are relative to its directory",
    )
    return parser


def main(argv: list[str]) -> int:
    args = parse(argv, _parse_fast, _parser, Options)
    prepare(args.archive, args.objects_out, args.manifest_out)
    return 0
