"""`dist-lto plan`: the command line of the planner (`dist_lto.planning.planner`)."""

from __future__ import annotations

import argparse

from dist_lto.planning.planner import PARALLEL_MIN_OBJECTS, plan


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dist-lto plan",
        description=(
            "Run stock LLD's ThinLTO index step for the link described by META (or read one"
            " that already ran) and write, at the paths META declares: each bitcode object's"
            " .thinlto.bc, a plan per object and per prepared archive, a link plan and the"
            " final link's argument file (use it as `COMMAND @FILE`). Formats: docs/plan.md."
        ),
        epilog=(
            "example: dist-lto plan meta.json -- clang -fuse-ld=lld -O2 -o app\n"
            "exit status: 0 success, 2 bad input, the index command's status when it fails,"
            " 1 internal failure"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("meta", metavar="META", help="the meta file (JSON, version 1)")
    parser.add_argument(
        "--replay",
        action="store_true",
        help="do not run the index step; read its outputs from the meta's index_dir",
    )
    parser.add_argument(
        "--no-declaration-imports",
        action="store_true",
        help="run the index step without -mllvm -import-declaration (on by default: the"
        " backends then address other modules' functions and data directly, as in-process"
        " ThinLTO does; docs/plan.md); with --replay, say that the index step ran so",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="processes that read imports and write object plans (default: one per CPU,"
        f" at most 8, for links of {PARALLEL_MIN_OBJECTS} objects or more; else 1)",
    )
    parser.add_argument(
        "command",
        nargs="*",
        metavar="-- COMMAND",
        help="the linker driver and the link's common flags, e.g. clang -fuse-ld=lld -O2 -o app"
        " (required unless --replay)",
    )
    own, command = (
        (argv, []) if "--" not in argv else (argv[: argv.index("--")], argv[argv.index("--") + 1 :])
    )
    args = parser.parse_args(own)
    if args.command:
        parser.error("put the index command after `--`")
    if not command and not args.replay:
        parser.error("the index command is required after `--` (or use --replay)")
    if args.jobs < 0:
        parser.error("--jobs must be 0 (one per CPU) or more")
    plan(
        args.meta,
        command,
        replay=args.replay,
        jobs=args.jobs,
        declaration_imports=not args.no_declaration_imports,
    )
    return 0
