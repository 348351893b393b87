# What the phases run: the dist-lto tools and the backend compiler. Each front end
# fills it from its own toolchain: our `llvm_toolchain` (prelude/toolchain.bzl) or, on
# Buck2's upstream prelude, the repository's `CxxToolchainInfo` plus the `dist_lto`
# cell's package target (upstream/cxx_binary.bzl).

load(":package.bzl", "dist_lto_command")

DistLtoRunnerInfo = provider(
    doc = "How to run the dist-lto package: made once per toolchain (`dist_lto_runner`).",
    fields = {
        # Python 3.11+ with orjson and libarchive-c: runs `prepare` and `plan`.
        "python": provider_field(str),
        # Python 3.11+, standard library only: runs `opt` with -S -E (fast start-up).
        "opt_python": provider_field(str),
        # The dist-lto package as its actions run it (package.bzl).
        "pkg": provider_field(Artifact),
        # The persistent worker that runs opt actions executed locally (`dist-lto
        # opt-worker`, started with `opt_python -S -E`, its planner with `python`); None:
        # every opt action starts `dist-lto opt`. See `opt_executable`.
        "opt_worker": provider_field(WorkerInfo | None),
        # Small modules of a plan share an opt action up to this many bytes (batches.bzl);
        # 0: one action per module.
        "opt_batch_bytes": provider_field(int),
        # Every opt action goes to the worker at once, taking no slot (opt.bzl); only with
        # a worker.
        "opt_queue": provider_field(bool),
    },
)

def dist_lto_runner(python: str, opt_python: str, pkg: Artifact, opt_worker: bool, opt_reuse_dir: str = "", opt_compile_server: bool = True, opt_batch_bytes: int = 0, opt_queue: bool = False, opt_jobs: int = 0, opt_run_ahead: bool = True) -> DistLtoRunnerInfo:
    """The runner of a toolchain. Its WorkerInfo is made here, once: every opt action
    naming it shares one worker process, sent as many requests as Buck2 has local slots.
    With `opt_reuse_dir` (relative to the project root, where Buck2 starts workers) the
    worker reuses a backend's last object when an edit did not change what it imports
    (`dist-lto opt-worker --reuse-dir`); "" runs every backend. Without
    `opt_compile_server` it forks every backend's clang instead of running backends in
    compile servers (`--no-compile-server`). `opt_jobs` (Buck2's `[build] threads`; 0:
    one per CPU) is how many backends the worker compiles at once when no request holds
    a slot (`--jobs`). Without `opt_run_ahead` it compiles no more than its requests
    hold slots for, even while a finished compile's slot is on its way back to Buck2
    (`--no-run-ahead`: no spare turns, no backend run ahead of its request).
    `opt_batch_bytes`, `opt_queue`: see `DistLtoRunnerInfo`."""
    worker = None
    if opt_worker:
        reuse = ["--reuse-dir", opt_reuse_dir] if opt_reuse_dir else []
        served = [] if opt_compile_server else ["--no-compile-server"]
        jobs = ["--jobs", str(opt_jobs)] if opt_jobs > 0 else []
        ahead = [] if opt_run_ahead else ["--no-run-ahead"]
        # Standard library only, as `dist-lto opt`; its planner runs `dist-lto plan`.
        worker = WorkerInfo(exe = cmd_args(dist_lto_command(opt_python, pkg, "opt-worker", fast = True), "--planner-python", python, reuse, served, jobs, ahead))
    return DistLtoRunnerInfo(
        python = python,
        opt_python = opt_python,
        pkg = pkg,
        opt_worker = worker,
        opt_batch_bytes = opt_batch_bytes,
        # Without a worker every unweighted action would be a clang Buck2 starts at once.
        opt_queue = opt_queue and worker != None,
    )

DistLtoTools = record(
    python = str,
    opt_python = str,
    pkg = Artifact,
    opt_worker = WorkerInfo | None,
    # See DistLtoRunnerInfo.
    opt_batch_bytes = int,
    opt_queue = bool,
    # The backend compiler (`dist-lto opt -- CLANG`): a path, or a tool's RunInfo.
    clang = str | RunInfo,
)

def tools_from_runner(runner: Provider, clang: str | RunInfo) -> DistLtoTools:
    """The phases' tools: a toolchain's `DistLtoRunnerInfo` and its backend compiler.

    `runner` is typed `Provider`: Buck2 evaluates a .bzl file once per cell of the build
    file that loads it, so the upstream route's runner (made by our cell's toolset
    target) is another evaluation's DistLtoRunnerInfo for a rule loaded from the user's
    cell, which a type check tells apart though `ctx.attrs[...]` finds it."""
    return DistLtoTools(
        python = runner.python,
        opt_python = runner.opt_python,
        pkg = runner.pkg,
        opt_worker = runner.opt_worker,
        opt_batch_bytes = runner.opt_batch_bytes,
        opt_queue = runner.opt_queue,
        clang = clang,
    )

def _through_worker(tools: DistLtoTools, command: cmd_args) -> WorkerRunInfo | RunInfo:
    """`command` as an action's `exe`: sent to the tools' worker when the action runs
    locally and there is one; run as it is otherwise (remotely, on a platform whose
    `CommandExecutorConfig` leaves `use_persistent_workers` false, or with no
    worker)."""
    if tools.opt_worker == None:
        return RunInfo(args = command)
    return WorkerRunInfo(worker = tools.opt_worker, exe = command)

def opt_executable(tools: DistLtoTools) -> WorkerRunInfo | RunInfo:
    """The `exe` of an opt action, whose arguments are `dist-lto opt`'s (after `opt`).

    Run locally, Buck2 sends the arguments to the tools' worker; otherwise the command
    is `dist-lto opt` followed by the arguments, exactly the command an opt action
    always ran.
    """
    return _through_worker(tools, dist_lto_command(tools.opt_python, tools.pkg, "opt", fast = True))

def link_executable(tools: DistLtoTools) -> WorkerRunInfo | None:
    """The `exe` of a final link action, whose arguments are the whole command (`DRIVER
    ... -o OUT @ARGS`), or None without a worker. Run locally, Buck2 sends the command to
    the worker, which runs the linker itself on the line the driver would give it, saving
    the driver's start (`worker/links.py`); otherwise the command runs as it is."""
    if tools.opt_worker == None:
        return None
    return WorkerRunInfo(worker = tools.opt_worker, exe = cmd_args())

def plan_executable(tools: DistLtoTools) -> WorkerRunInfo | RunInfo:
    """The `exe` of a plan action, whose arguments start with `plan`: the worker runs
    it locally in a child of its warm planner, where the command would start an
    interpreter and import the planner on the link's critical path; otherwise it is
    the command `dist-lto plan ...`."""
    return _through_worker(tools, dist_lto_command(tools.python, tools.pkg, ""))
