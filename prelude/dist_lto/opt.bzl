# Phase 3: one backend action per bitcode module, each a dynamic_output reading its
# plan. An action's inputs are exactly its module, its index, the modules the plan
# says it imports (single archive members: the objects themselves, or files projected
# out of the prepared directories), the link's flags and the dist-lto sources: ready
# for remote execution (tests/test_buck2_remote.py builds on an engine whose input
# roots hold only declared inputs).
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
# Buck2 starts the opt worker with the first action that names it, and a worker starts
# in a fraction of a second (an interpreter, gRPC, a fork-served clang): so that the
# first backend does not wait for it, each link's plan action also waits for a
# `--ready` request (`start_opt_worker`), which takes no slot and runs while the
# compiles do.

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

def _split_dwarf_args(link: DistLink, dwo) -> list:
    """`dist-lto opt`'s split-DWARF options for the link's mode (`dwo`: the module's
    .dwo output in `split` mode)."""
    if link.split_dwarf == "split":
        return ["--dwo", dwo]
    if link.split_dwarf == "single":
        return ["--split-dwarf=single"]
    return []

def _run_opt(
        ctx: AnalysisContext,
        toolchain: DistLtoTools,
        link: DistLink,
        module: Artifact,
        index_file: Artifact,
        out,
        dwo,
        imports: list[Artifact],
        identifier: str,
        largest: bool) -> None:
    cmd = cmd_args(
        "--input",
        module,
        "--index",
        index_file,
        "--out",
        out,
        _split_dwarf_args(link, dwo),
        "--args",
        link.link_flags_file,
        ["--unweighted"] if largest else [],
        "--",
        toolchain.clang,
        hidden = imports + link.backend_inputs,
    )
    if largest:
        ctx.actions.run(cmd, category = "thin_lto_opt", identifier = identifier, exe = opt_executable(toolchain), weight_percentage = 0)
    else:
        ctx.actions.run(cmd, category = "thin_lto_opt", identifier = identifier, exe = opt_executable(toolchain))

def start_opt_worker(ctx: AnalysisContext, tools: DistLtoTools, link_name: str) -> Artifact | None:
    """A stamp that the opt worker and a fork-served backend compiler have started (None
    without a worker): an input of the plan action, so Buck2 runs it at the start of the
    build, beside the compiles."""
    if tools.opt_worker == None:
        return None
    stamp = ctx.actions.declare_output("dist_lto/{}/opt_worker.ready".format(link_name))
    ctx.actions.run(
        cmd_args("--ready", stamp.as_output(), "--", tools.clang),
        category = "thin_lto_opt_ready",
        identifier = link_name,
        exe = opt_executable(tools),
        weight_percentage = 0,
    )
    return stamp

def opt_object(ctx: AnalysisContext, toolchain: DistLtoTools, link: DistLink, index: int) -> None:
    """Bind object `index`'s optimised object (and .dwo file) from its plan."""
    obj = link.objects[index]
    declared = [obj.opt.as_output()] + ([obj.dwo.as_output()] if obj.dwo else [])

    def optimize(ctx: AnalysisContext, artifacts, outputs) -> None:
        plan = read_object_plan(artifacts, obj.plan)
        if not plan["is_bitcode"]:
            # Native after all: the final link uses the object itself; bind the
            # declared output to a copy so that it exists.
            ctx.actions.copy_file(outputs[obj.opt], obj.object)
            if obj.dwo:
                ctx.actions.write(outputs[obj.dwo], "")
            return
        _run_opt(
            ctx,
            toolchain,
            link,
            obj.object,
            obj.index_file,
            outputs[obj.opt].as_output(),
            outputs[obj.dwo].as_output() if obj.dwo else None,
            _imports(link, _member_lookup(link, artifacts), plan),
            "{}/{}:{}".format(link.name, index, obj.object.short_path),
            plan["largest"],
        )

    ctx.actions.dynamic_output(
        dynamic = [obj.plan] + _manifests(link),
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
        for entry in plan["members"]:
            if not entry["opt"]:
                continue
            prefix = "dist_lto/{}/archives/{}/opt_members/{}".format(link.name, index, entry["opt_object"])
            out = ctx.actions.declare_output(prefix)
            dwo = ctx.actions.declare_output(prefix + ".dwo") if archive.dwo_dir else None
            _run_opt(
                ctx,
                toolchain,
                link,
                member(index, entry["position"]),
                archive.index_dir.project(entry["index_file"]),
                out.as_output(),
                dwo.as_output() if dwo else None,
                _imports(link, member, entry),
                "{}/archive {}:{}@{}".format(link.name, index, entry["name"], entry["position"]),
                entry["largest"],
            )
            optimised[entry["opt_object"]] = out
            if dwo:
                dwos[entry["opt_object"] + ".dwo"] = dwo
        ctx.actions.symlinked_dir(outputs[archive.opt_dir], optimised)
        if archive.dwo_dir:
            ctx.actions.symlinked_dir(outputs[archive.dwo_dir], dwos)

    ctx.actions.dynamic_output(
        dynamic = [archive.plan] + _manifests(link),
        outputs = declared,
        f = optimize,
    )

