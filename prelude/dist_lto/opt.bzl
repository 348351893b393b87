# Phase 3: the backend actions, made by a dynamic_output for the link's objects and one
# per archive from their plans: one action per bitcode module, or per batch of small
# ones with `opt_batch_bytes` (batches.bzl). An action's inputs are exactly its
# modules, their indexes, the modules their plans say they import (single archive
# members: the objects themselves, or files projected out of the prepared
# directories), the link's flags and the dist-lto sources: ready for remote execution
# (tests/test_buck2_remote.py builds on an engine whose input roots hold only declared
# inputs).
#
# The link's largest module (its plan says `largest`) does not queue: in-process LLD
# starts its largest backend first, since it tends to end last, but Buck2 gives the
# local slots in an order of its own, so the rules give that one action no weight
# (`weight_percentage = 0`: it starts as soon as its inputs are ready, beside the
# actions holding the slots; the worker, which declares no concurrency of its own,
# takes it at once). It says so (`--unweighted`), and the worker compiles it first, in
# one of the slots the other requests hold, so that no more backends compile at once
# than Buck2 has slots. An engine ignores the weight.
#
# With `[dist_lto] opt_queue` every opt action is unweighted: Buck2 sends the worker a
# link's backends as soon as its plan is read, and the worker compiles them largest
# first, no more at once than the slots of requests in flight or, while none holds
# one, `[build] threads` (one per CPU without it). A CPU then never waits for Buck2 to
# hand a slot from one backend to the next (about 10 ms each here,
# docs/benchmarks.md), at a price: `buck2 build -j N` does not reach the worker, and
# Buck2 runs other actions beside those backends as if they took no CPU
# (docs/buck2.md).
#
# Buck2 starts the opt worker with the first action that names it, and a worker starts
# in a fraction of a second (an interpreter, its modules, a compile server): so that the
# first backend does not wait for it, each link's plan action also waits for a
# `--ready` request (`start_opt_worker`), which takes no slot and runs while the
# compiles do.

load(":batches.bzl", "OptBackend", "opt_batches")
load(":formats.bzl", "manifest_member_files", "read_archive_plan", "read_manifest", "read_object_plan")
load(":linkables.bzl", "known_objects")
load(":tools.bzl", "DistLtoTools", "opt_executable")
load(":types.bzl", "DistLink")

def _member_files(link: DistLink, artifacts, archive_index: int) -> dict[int, Artifact]:
    """Archive `archive_index`'s members as the index step read them, by position: the
    objects it was made of, or files projected out of the prepared directory."""
    archive = link.archives[archive_index]
    if not archive.manifest:
        return {i: m for i, m in enumerate(known_objects(archive.linkable))}
    manifest = read_manifest(artifacts, archive.manifest)
    return manifest_member_files(manifest, archive.objects_dir, "archive {}".format(archive_index))

def _member_lookup(link: DistLink, artifacts) -> typing.Callable:
    """`lookup(archive, position) -> Artifact`, reading each manifest at most once per
    callback (an archive's callback asks for every member and every member's imports)."""
    seen = {}

    def lookup(archive_index: int, position: int) -> Artifact:
        if archive_index not in seen:
            seen[archive_index] = _member_files(link, artifacts, archive_index)
        found = seen[archive_index].get(position)
        if found == None:
            fail("archive {} has no member at position {}".format(archive_index, position))
        return found

    return lookup

def _imports(link: DistLink, member: typing.Callable, plan: dict) -> list[Artifact]:
    found = [link.objects[i].object for i in plan["imports"]]
    for archive_index, position in plan["member_imports"]:
        found.append(member(archive_index, position))
    return found

def _manifests(link: DistLink) -> list[Artifact]:
    """The manifests an opt callback may read to find imported archive members."""
    return [a.manifest for a in link.archives if a.manifest]

def _run_opt(ctx: AnalysisContext, toolchain: DistLtoTools, link: DistLink, batch: list[OptBackend]) -> None:
    """One opt action for `batch`'s backends (`dist-lto opt` with their files in order)."""
    files = []
    imports = []
    for backend in batch:
        files += ["--input", backend.module, "--index", backend.index_file, "--out", backend.out]
        if link.split_dwarf == "split":
            files += ["--dwo", backend.dwo]
        imports += backend.imports
    # No slot: the worker holds these at once and compiles them largest first.
    unweighted = toolchain.opt_queue or (len(batch) == 1 and batch[0].largest)
    identifier = batch[0].identifier
    if len(batch) > 1:
        identifier += " +{}".format(len(batch) - 1)
    cmd = cmd_args(
        files,
        ["--split-dwarf=single"] if link.split_dwarf == "single" else [],
        "--args",
        link.link_flags_file,
        ["--unweighted"] if unweighted else [],
        "--",
        toolchain.clang,
        hidden = imports + link.backend_inputs,
    )
    if unweighted:
        ctx.actions.run(cmd, category = "thin_lto_opt", identifier = identifier, exe = opt_executable(toolchain), weight_percentage = 0)
    else:
        ctx.actions.run(cmd, category = "thin_lto_opt", identifier = identifier, exe = opt_executable(toolchain))

def start_opt_worker(ctx: AnalysisContext, tools: DistLtoTools, link_name: str, driver: cmd_args) -> Artifact | None:
    """A stamp that the opt worker and a fork-served backend compiler have started, and
    that the worker is finding the linker's line behind the link's `driver` (None
    without a worker): an input of the plan action, so Buck2 runs it at the start of the
    build, beside the compiles."""
    if tools.opt_worker == None:
        return None
    stamp = ctx.actions.declare_output("dist_lto/{}/opt_worker.ready".format(link_name))
    driver_file, macro_files = ctx.actions.write("dist_lto/{}/link_driver".format(link_name), driver, allow_args = True)
    ctx.actions.run(
        cmd_args("--ready", stamp.as_output(), "--link-driver", driver_file, "--", tools.clang, hidden = [driver] + macro_files),
        category = "thin_lto_opt_ready",
        identifier = link_name,
        exe = opt_executable(tools),
        weight_percentage = 0,
    )
    return stamp

def opt_objects(ctx: AnalysisContext, toolchain: DistLtoTools, link: DistLink) -> None:
    """Bind the link's optimised objects (and .dwo files) from their plans."""
    if not link.objects:
        return
    declared = []
    for obj in link.objects:
        declared.append(obj.opt.as_output())
        if obj.dwo:
            declared.append(obj.dwo.as_output())

    def optimize(ctx: AnalysisContext, artifacts, outputs) -> None:
        member = _member_lookup(link, artifacts)
        backends = []
        for index, obj in enumerate(link.objects):
            plan = read_object_plan(artifacts, obj.plan)
            if not plan["is_bitcode"]:
                # Native after all: the final link uses the object itself; bind the
                # declared output to a copy so that it exists.
                ctx.actions.copy_file(outputs[obj.opt], obj.object)
                if obj.dwo:
                    ctx.actions.write(outputs[obj.dwo], "")
                continue
            backends.append(OptBackend(
                module = obj.object,
                index_file = obj.index_file,
                out = outputs[obj.opt].as_output(),
                dwo = outputs[obj.dwo].as_output() if obj.dwo else None,
                imports = _imports(link, member, plan),
                size = plan["size"],
                largest = plan["largest"],
                identifier = "{}/{}:{}".format(link.name, index, obj.object.short_path),
            ))
        for batch in opt_batches(backends, toolchain.opt_batch_bytes):
            _run_opt(ctx, toolchain, link, batch)

    ctx.actions.dynamic_output(
        dynamic = [obj.plan for obj in link.objects] + _manifests(link),
        outputs = declared,
        f = optimize,
    )

def opt_archive(ctx: AnalysisContext, toolchain: DistLtoTools, link: DistLink, index: int) -> None:
    """Bind archive `index`'s directory of optimised members (and of their .dwo files)
    from its plan."""
    archive = link.archives[index]
    declared = [archive.opt_dir.as_output()] + ([archive.dwo_dir.as_output()] if archive.dwo_dir else [])

    def optimize(ctx: AnalysisContext, artifacts, outputs) -> None:
        plan = read_archive_plan(artifacts, archive.plan)
        member = _member_lookup(link, artifacts)
        optimised = {}
        dwos = {}
        backends = []
        for entry in plan["members"]:
            if not entry["opt"]:
                continue
            prefix = "dist_lto/{}/archives/{}/opt_members/{}".format(link.name, index, entry["opt_object"])
            out = ctx.actions.declare_output(prefix)
            dwo = ctx.actions.declare_output(prefix + ".dwo") if archive.dwo_dir else None
            backends.append(OptBackend(
                module = member(index, entry["position"]),
                index_file = archive.index_dir.project(entry["index_file"]),
                out = out.as_output(),
                dwo = dwo.as_output() if dwo else None,
                imports = _imports(link, member, entry),
                size = entry["size"],
                largest = entry["largest"],
                identifier = "{}/archive {}:{}@{}".format(link.name, index, entry["name"], entry["position"]),
            ))
            optimised[entry["opt_object"]] = out
            if dwo:
                dwos[entry["opt_object"] + ".dwo"] = dwo
        for batch in opt_batches(backends, toolchain.opt_batch_bytes):
            _run_opt(ctx, toolchain, link, batch)
        ctx.actions.symlinked_dir(outputs[archive.opt_dir], optimised)
        if archive.dwo_dir:
            ctx.actions.symlinked_dir(outputs[archive.dwo_dir], dwos)

    ctx.actions.dynamic_output(
        dynamic = [archive.plan] + _manifests(link),
        outputs = declared,
        f = optimize,
    )

