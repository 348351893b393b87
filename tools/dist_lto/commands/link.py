"""`dist-lto link`: run a planned link without a build system, or plan and run a link line.

`dist-lto plan` writes, per link, what a build system schedules: one backend per loaded
bitcode module and a final-link argument file (docs/plan.md). This command runs them:
it turns the plans into the jobs of a DTLTO job file (module, index, imported modules,
native object) and hands them to the distributor's session (`distribute/session.py`
`run_jobs`: biggest module first, the strict runner of `backend.py`, the result cache,
fork servers, the jobserver, progress, summary and trace), then runs the final link,
`COMMAND @final-link.args`, as the planner's index step ran `COMMAND`. Given a plain
link line and `--out-dir`, it first prepares the archives, writes the meta file
(`planning/from_command.py`) and plans.
"""

import argparse
import os
import stat

from dist_lto.distribute import settings as distribute_settings
from dist_lto.distribute.reporting import Reporter, progress_terminal
from dist_lto.distribute.session import run_jobs, write_trace
from dist_lto.errors import BadInput, DistLtoError
from dist_lto.formats.jobfile import JobFile
from dist_lto.formats.meta import read_meta
from dist_lto.fsutil import remove_named, temp_path_for
from dist_lto.llvm import link_command
from dist_lto.planning.jobs import job_file
from dist_lto.process import children

PROG = "dist-lto link"
USAGE = (
    "dist-lto link [-h] [--jobs N] [--cache-dir DIR | --no-cache] [--cache-max-size SIZE]\n"
    "                     [--no-fork-server] [--no-compile-server]\n"
    "                     [--verbose | --quiet] [--trace FILE]\n"
    "                     [--compiler CLANG] [--no-lld-defaults]\n"
    "                     (META -- COMMAND... |\n"
    "                      --out-dir DIR [--no-declaration-imports] -- LINK COMMAND...)"
)
DESCRIPTION = """\
Run a link that `dist-lto plan META -- COMMAND...` planned, without Buck2: every
backend the plans ask for, then the final link `COMMAND @<final_link_args_output>`.
Give the same COMMAND as to `plan` (the linker driver, its flags and -o), in the same
directory:

  dist-lto plan meta.json -- clang -fuse-ld=lld -O2 -o app
  dist-lto link meta.json -- clang -fuse-ld=lld -O2 -o app

Or give the whole link line, inputs included, and a directory for everything else:

  dist-lto link --out-dir app.lto -- clang -fuse-ld=lld -O2 main.o libfoo.a -lm -o app

which prepares each archive (regular or thin, once however often the line names it),
writes the meta file, plans (the index step) and links, every file it writes below DIR
but the program itself (-o). --start-group/--end-group need not be dropped: LLD
resolves archives wherever they stand, so the group flags are left out of the index
step and the final link.

Backends run as `dist-lto distribute` runs a job file's jobs: N at a time, biggest
module first, each checked strictly (the module must be its index's primary module;
clang's status passes through; an exit 0 without a complete ELF object fails; objects
appear only by rename), through the same result cache and fork servers, sharing GNU
make's job slots under `make -j`. Their flags are translated from COMMAND's as for
`dist-lto opt`, so that the code equals in-process ThinLTO's. Output directories are
created. The final link runs only when every backend succeeded."""
EPILOG = """\
Exit status: 0 success; 2 bad input (META, a plan, COMMAND's flags, a COMMAND other
than the one the plans were made from); a failing backend's, the index step's or the
final link's own status (128+N for signal N); 1 when a backend exits 0 without a
complete object; 128+N when stopped by signal N. See docs/link.md."""


def build_parser() -> argparse.ArgumentParser:
    from dist_lto import configuration

    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=USAGE,
        description=DESCRIPTION,
        epilog=EPILOG + "\n\n" + configuration.describe(configuration.LOCAL),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    distribute_settings.add_local_options(parser)
    distribute_settings.add_report_options(parser)
    parser.add_argument(
        "--compiler",
        metavar="CLANG",
        help="the backends' compiler (default: COMMAND's program, when it is a clang)",
    )
    parser.add_argument(
        "--no-lld-defaults",
        action="store_true",
        help="as for `dist-lto opt`: without -ffunction-sections -fdata-sections -faddrsig",
    )
    parser.add_argument(
        "--out-dir",
        metavar="DIR",
        help="plan and run the whole link line after --: prepared archives, the meta file,"
        " the index, the plans and the optimised objects go below DIR",
    )
    parser.add_argument(
        "--no-declaration-imports",
        action="store_true",
        help="with --out-dir: as for `dist-lto plan`, no -mllvm -import-declaration",
    )
    parser.add_argument(
        "meta", nargs="?", metavar="META", help="the meta file `dist-lto plan` read"
    )
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """The options before `--`, and the command after it as `command`."""
    parser = build_parser()
    own, command = (
        (argv, []) if "--" not in argv else (argv[: argv.index("--")], argv[argv.index("--") + 1 :])
    )
    opts = parser.parse_args(own)
    opts.command = command
    if not command:
        parser.error("the link command is required after `--`")
    if opts.out_dir is None and opts.meta is None:
        parser.error("give META (a planned link) or --out-dir DIR (a link line to plan)")
    if opts.out_dir is not None and opts.meta is not None:
        parser.error("give META or --out-dir, not both")
    if opts.no_declaration_imports and opts.out_dir is None:
        parser.error("--no-declaration-imports is for --out-dir; without it, give it to plan")
    return opts


def _settings(opts: argparse.Namespace) -> distribute_settings.Settings:
    """The distributor's settings, from the options both commands share."""
    shared = distribute_settings.Options()
    for name in ("jobs", "cache_dir", "cache_max_size", "no_cache", "no_fork_server",
                 "no_compile_server", "verbose", "quiet", "trace"):  # fmt: skip
        setattr(shared, name, getattr(opts, name))
    return distribute_settings.Settings(shared, remote=False)


def _make_output_dirs(files: JobFile) -> None:
    for directory in sorted({os.path.dirname(job.output) for job in files.jobs} - {""}):
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as err:
            raise BadInput(
                f"{directory}: cannot create the output directory: {err.strerror}"
            ) from None


def _final_link(command: list[str], args_file: str) -> None:
    """`COMMAND @args_file`, its output and errors on ours; its status passes through. The
    linker writes a hidden temporary beside the output, renamed over it on success and
    removed otherwise, with any temporary the linker made of it in turn
    (`.OUTPUT.tmp-...tmpXXXXXX`, which a linker stopped at the wrong moment leaves), so
    a stopped link leaves nothing of its own beside the output."""
    argv = [*command, f"@{args_file}"]
    run, temporary, output = _through_temporary(command)
    try:
        try:
            done = children.run([*run, f"@{args_file}"], stderr=children.INHERIT)
        except children.CannotRun as err:
            raise BadInput(f"{command[0]}: cannot run the final link: {err.reason}") from None
        if done.status != 0:
            status = children.action_status(done.status)
            raise DistLtoError(
                f"the final link failed (status {status}): {' '.join(argv)}", status=status
            )
        if temporary:
            try:
                os.replace(temporary, output)
            except OSError as err:
                raise DistLtoError(
                    f"{output}: the final link's output could not be put in place: {err.strerror}"
                ) from None
            temporary = ""
    finally:
        if temporary:  # the linker has gone (`children.run` waits for its group)
            remove_named(os.path.dirname(temporary), os.path.basename(temporary))


def _through_temporary(command: list[str]) -> tuple[list[str], str, str]:
    """COMMAND writing a hidden temporary beside its output, the temporary and the output;
    COMMAND as given (and no temporary) when its output is not a regular file or absent in
    an existing directory (`-`, a device, a missing directory: the linker says what is
    wrong with it)."""
    found = link_command.with_output(command, "")
    if found is None or found[1] == "-":
        return command, "", ""
    output = found[1]
    try:
        if not os.path.isdir(os.path.dirname(output) or "."):
            return command, "", ""
        if not stat.S_ISREG(os.lstat(output).st_mode):
            return command, "", ""
    except FileNotFoundError:
        pass  # a new output
    except OSError:
        return command, "", ""
    temporary = temp_path_for(output)
    rewritten = link_command.with_output(command, temporary)
    assert rewritten is not None
    return rewritten[0], temporary, output


def _planned(opts: argparse.Namespace) -> tuple[str, list[str]]:
    """The meta file and COMMAND to link: as given, or, with --out-dir, those of the link
    line after it has been prepared and planned."""
    if opts.out_dir is None:
        return opts.meta, opts.command
    from dist_lto.planning.from_command import write_meta
    from dist_lto.planning.planner import plan

    made = write_meta(opts.command, opts.out_dir)
    plan(made.meta, made.command, replay=False, declaration_imports=not opts.no_declaration_imports)
    return made.meta, made.command


def main(argv: list[str]) -> int:
    opts = parse(argv)
    settings = _settings(opts)
    meta_file, command = _planned(opts)
    meta = read_meta(meta_file)
    files = job_file(meta, command, opts.compiler, lld_defaults=not opts.no_lld_defaults)
    _make_output_dirs(files)
    reporter = Reporter(
        len(files.jobs),
        verbose=settings.verbose,
        tty=progress_terminal(),
        quiet=settings.quiet,
        prog=PROG,
        name=os.path.basename(files.linker_output),
    )
    trace = None
    if settings.trace is not None:
        from dist_lto.distribute.trace import Trace

        trace = Trace(settings.trace, f"{PROG} {files.linker_output}")
    try:
        run_jobs(files, settings, reporter, trace)
        started = trace.now() if trace is not None else 0
        _final_link(command, meta.final_link_args_output)
        if trace is not None:
            trace.name_thread(0, "link")
            trace.add(
                0, "final link", "link", started, trace.now(), {"output": files.linker_output}
            )
    finally:
        write_trace(trace, reporter)
    return 0
