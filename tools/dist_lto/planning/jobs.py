"""A planned link's backends as the jobs of a DTLTO job file, for `dist-lto link`.

Each loaded bitcode module becomes one job: its module, its index file and the modules
it imports as inputs, its object as output, and the backend flags translated from the
link command's as `dist-lto opt` translates them, so the distributor's session runs
them exactly as it runs the jobs LLD hands it.
"""

import os

from dist_lto.errors import BadInput
from dist_lto.formats.jobfile import Job, JobFile
from dist_lto.formats.meta import Meta
from dist_lto.formats.planned_link import PlannedLink, read_planned_link
from dist_lto.llvm.flags import translate
from dist_lto.llvm.index_step import is_raw_linker
from dist_lto.llvm.link_command import difference


def _compiler(compiler: str | None, command: list[str]) -> str:
    if compiler:
        return compiler
    program = command[0]
    if os.path.basename(program).startswith("clang"):
        return str(program)
    raise BadInput(
        f"{program}: not a clang driver; name the backends' compiler with --compiler CLANG"
    )


def _output_name(command: list[str], meta: Meta) -> str:
    """The link's output (`-o`), for messages and the trace; else the meta file's name."""
    for i, arg in enumerate(command):
        if arg == "-o" and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith("-o") and len(arg) > 2:
            return arg[2:]
    return meta.file


def _flag_files(flags: list[str]) -> list[str]:
    """Files the backend flags name after an `=` (a sample profile, a pass plugin): the
    cache must hash their contents, as LLD's `common.inputs` are."""
    found = []
    for flag in flags:
        _, eq, value = flag.partition("=")
        if eq and value and os.path.isfile(value):
            found.append(value)
    return found


def _driver_form(command: list[str]) -> list[str]:
    """COMMAND's flags as a clang driver would be given them: a linker's own flags
    (`ld.lld -m elf_x86_64 -mllvm -import-instr-limit=5 -r`) each behind `-Xlinker`."""
    if not is_raw_linker(command):
        return command[1:]
    return [word for arg in command[1:] for word in ("-Xlinker", arg)]


def _same_command(planned: PlannedLink, command: list[str]) -> None:
    """The plans hold for the command they were made from: another one (other flags,
    another output) would link backends of one link against the index of another."""
    if planned.command is None:
        return  # replayed without a command: nothing to compare with
    changed = difference(planned.command, command)
    if changed is not None:
        raise BadInput(
            f"{planned.meta.link_plan_output}: COMMAND is not the one the plans were made"
            f" from: {changed}; plan again with this COMMAND, or link with the planned one"
        )


def job_file(
    meta: Meta, command: list[str], compiler: str | None, *, lld_defaults: bool
) -> JobFile:
    """The planned backends of `meta`, linked by `command`, as a DTLTO job file's jobs;
    `compiler` runs them (default: `command`'s program when it is a clang driver)."""
    planned = read_planned_link(meta, command)
    _same_command(planned, command)
    backend = translate(_driver_form(command), lld_defaults=lld_defaults, origin="COMMAND")
    if backend.split_dwarf:
        raise BadInput(
            "COMMAND asks for split DWARF (-gsplit-dwarf), which dist-lto link does not"
            " support: run the backends with `dist-lto opt --dwo`"
        )
    common = [_compiler(compiler, command), "-c", "-x", "ir", *backend.flags]
    jobs: list[Job] = []
    for module in planned.modules.values():
        if module.index_file is None or module.output is None:
            continue  # no backend: native, or never loaded
        args = [module.path, f"-fthinlto-index={module.index_file}", "-o", module.output]
        inputs = [module.path, module.index_file, *planned.import_paths(module)]
        jobs.append(Job(len(jobs), args, inputs, [module.output], 2))
    name = _output_name(command, meta)
    return JobFile(meta.file, name, common, _flag_files(backend.flags), jobs)
