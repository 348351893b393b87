"""Each job's relocation model, when the job file names none: the module's own.

LLD 22 writes `-fpic` into a job file's common arguments for `-pie` and `-shared`
links and nothing for the others. For a relocatable link (`-r`, the Linux kernel's LTO
link), in-process LLD compiles each module with the model it was compiled with; a
`clang -x ir` backend given no flag uses its driver's default instead (PIE on Debian),
so non-PIC bitcode fails (`invalid operand for inline asm constraint 'i'`) or compiles
to other code. Each such job gets its module's flag (`llvm/module_flags.py`) at the end
of its arguments, before any cache key is made from them.

A `-no-pie` or `-static` link writes the same job file as `-r`; in-process LLD compiles
those static. The module's model is the same for non-PIC bitcode; for PIC bitcode it is
what LLD's own DTLTO does (see docs/distribute.md).
"""

from dist_lto.formats.jobfile import Job, JobFile
from dist_lto.llvm.module_flags import module_relocation_flag, says_relocation_model


def with_module_models(files: JobFile) -> JobFile:
    """`files` with the module's relocation flag added to every job whose command names
    none (BadInput when a module cannot be read)."""
    if not files.jobs or says_relocation_model(files.args):
        return files
    jobs = []
    for job in files.jobs:
        if says_relocation_model(job.args):
            jobs.append(job)
            continue
        flag = module_relocation_flag(job.module)
        jobs.append(Job(job.number, [*job.args, flag], job.inputs, job.outputs, job.output_at))
    return JobFile(files.path, files.linker_output, files.args, files.inputs, jobs)
