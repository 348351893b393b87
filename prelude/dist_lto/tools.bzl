# What the phases run: the dist-lto tools and the backend compiler. Each front end
# fills it from its own toolchain: our `llvm_toolchain` (prelude/toolchain.bzl) or, on
# Buck2's upstream prelude, the repository's `CxxToolchainInfo` plus the `dist_lto`
# cell's package target (upstream/cxx_binary.bzl).

load(":package.bzl", "dist_lto_command")

DistLtoTools = record(
    # Python 3.11+ with orjson and libarchive-c: runs `prepare` and `plan`.
    python = str,
    # Python 3.11+, standard library only: runs `opt` with -S -E (fast start-up).
    opt_python = str,
    # A directory holding the `dist_lto` package and its compiled bytecode.
    dist_lto_pkg = Artifact,
    # The persistent worker that runs opt actions executed locally (`dist-lto
    # opt-worker`); None: every opt action starts `dist-lto opt`. See `opt_executable`.
    opt_worker = WorkerInfo | None,
    # The backend compiler (`dist-lto opt -- CLANG`): a path, or a tool's RunInfo.
    clang = str | RunInfo,
)

def opt_executable(tools: DistLtoTools) -> WorkerRunInfo | RunInfo:
    """The `exe` of an opt action, whose arguments are `dist-lto opt`'s (after `opt`).

    Run locally, Buck2 sends the arguments to the tools' worker; run remotely (or with
    `[build] use_persistent_workers = false`, or no worker), the command is `dist-lto opt`
    followed by the arguments, exactly the command an opt action always ran.
    """
    opt = dist_lto_command(tools.opt_python, tools.dist_lto_pkg, "opt", fast = True)
    if tools.opt_worker == None:
        return RunInfo(args = opt)
    return WorkerRunInfo(worker = tools.opt_worker, exe = opt)
