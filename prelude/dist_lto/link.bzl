# Distributed ThinLTO, phase by phase, for every front end: our own cxx_binary
# (prelude/cxx/binary.bzl) and dist_lto_cxx_binary over Buck2's upstream prelude
# (upstream/cxx_binary.bzl). One definition of the phases:
#
#   1. prepare: each archive that may hold bitcode and whose objects the rules do not
#      know (`known_objects`) -> objects + manifest (prepare.bzl)
#   2. index + plans: one `dist-lto plan` action over the meta file (plan.bzl)
#   3. opt: a dynamic_output for the bitcode objects and one per archive, each reading
#      plans and running `dist-lto opt` per module or batch of small ones (opt.bzl)
#   4. final link: a dynamic_output reading the link plan (final_link.bzl)
#
# Works with stock LLD: the final link line comes from the original link order and
# the plans, not from LLD's `--thinlto-full-index` (which only Meta's LLD has). This
# file and the phases load nothing outside this directory, so either cell loads them.

load(":final_link.bzl", "final_link")
load(":linkables.bzl", "LinkGroup")
load(":opt.bzl", "opt_archive", "opt_objects", "start_opt_worker")
load(":plan.bzl", "collect_link", "run_plan")
load(":tools.bzl", "DistLtoTools")
load(":types.bzl", "DistLink", "LinkedBinary", "SPLIT_DWARF_MODES")

def dist_lto_link(
        ctx: AnalysisContext,
        tools: DistLtoTools,
        name: str,
        groups: list[LinkGroup],
        driver: cmd_args,
        backend_flags: list,
        backend_inputs: list[Artifact] = [],
        split_dwarf: str = "none") -> LinkedBinary:
    """Link `groups` into the binary `name` with distributed ThinLTO.

    Args:
        name: the binary's name, unique among the target's links (outputs and action
            identifiers of this link are scoped by it).
        groups: the link's inputs in order, flags that must follow the inputs last.
        driver: the linker driver and the flags before any input (`clang++ -fuse-ld=lld
            ...`): the index step and the final link run it.
        backend_flags: the link's flags as the backends read them (`dist-lto opt --args`
            translates the codegen ones: -O, -mllvm, the sample profile...).
        backend_inputs: files `backend_flags` name (a sample profile): inputs of every
            backend.
        split_dwarf: one of SPLIT_DWARF_MODES.
    """
    if split_dwarf not in SPLIT_DWARF_MODES:
        fail("dist_lto_link `{}`: split_dwarf must be one of {}, got `{}`".format(name, SPLIT_DWARF_MODES, split_dwarf))
    out = ctx.actions.declare_output(name)
    prefix = "dist_lto/" + name
    collected = collect_link(ctx, tools, name, groups, split_dwarf == "split")

    # Flags may come from attributes with macros (a toolchain's linker_flags): those
    # files are written beside and read with the flags.
    link_flags_file, macro_files = ctx.actions.write(prefix + "/link_flags", cmd_args(backend_flags), allow_args = True)
    link = DistLink(
        name = name,
        objects = collected.objects,
        archives = collected.archives,
        static_inputs = collected.static_inputs,
        link_flags_file = link_flags_file,
        backend_inputs = backend_inputs + macro_files,
        split_dwarf = split_dwarf,
        final_link_args = ctx.actions.declare_output(prefix, "final_link.args"),
        link_plan = ctx.actions.declare_output(prefix, "link_plan.json"),
    )
    ready = start_opt_worker(ctx, tools, name, driver)
    run_plan(ctx, tools, name, collected, driver, link.link_plan, link.final_link_args, [ready] if ready else [])
    opt_objects(ctx, tools, link)
    for i in range(len(link.archives)):
        opt_archive(ctx, tools, link, i)
    final_link(ctx, tools, link, driver, out)
    debug_files = [o.dwo for o in link.objects if o.dwo] + [a.dwo_dir for a in link.archives if a.dwo_dir]
    return LinkedBinary(binary = out, debug_files = debug_files)
