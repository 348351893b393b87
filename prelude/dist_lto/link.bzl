# Distributed ThinLTO for cxx_binary(dist_lto = True), phase by phase:
#
#   1. prepare: each archive that may hold bitcode -> objects + manifest (prepare.bzl)
#   2. index + plans: one `dist-lto plan` action over the meta file (plan.bzl)
#   3. opt: one dynamic_output per bitcode object and per archive, each reading its
#      plan and running `dist-lto opt` per module (opt.bzl)
#   4. final link: a dynamic_output reading the link plan (final_link.bzl)
#
# Works with stock LLD: the final link line comes from the original link order and
# the plans, not from LLD's `--thinlto-full-index` (which only Meta's LLD has).

load("//cxx:link.bzl", "link_driver", "sample_profile_flags")
load("//cxx:providers.bzl", "LinkGroup")
load("//toolchain.bzl", "LlvmToolchainInfo")
load(":final_link.bzl", "final_link")
load(":opt.bzl", "opt_archive", "opt_object")
load(":plan.bzl", "collect_link", "run_plan")
load(":types.bzl", "DistLink")

def dist_lto_link(
        ctx: AnalysisContext,
        toolchain: LlvmToolchainInfo,
        name: str,
        groups: list[LinkGroup],
        linker_flags: list[str],
        sample_profile: Artifact | None) -> Artifact:
    """Link `groups` into the binary `name` with distributed ThinLTO.

    Args:
        name: the binary's name, unique among the target's links (outputs and action
            identifiers of this link are scoped by it).
        groups: the link's inputs in order (the binary's linker flags last).
        linker_flags: the binary's linker flags, for the backends' flags file.
        sample_profile: a sample profile every backend reads (then an input of each).
    """
    out = ctx.actions.declare_output(name)
    prefix = "dist_lto/" + name
    driver = cmd_args(link_driver(toolchain, groups), toolchain.linker_flags)
    collected = collect_link(ctx, toolchain, name, groups)
    link = DistLink(
        name = name,
        objects = collected.objects,
        archives = collected.archives,
        static_inputs = collected.static_inputs,
        link_flags_file = ctx.actions.write(
            prefix + "/link_flags",
            cmd_args(toolchain.linker_flags, "-flto=thin", linker_flags, sample_profile_flags(sample_profile)),
        ),
        backend_inputs = [sample_profile] if sample_profile else [],
        final_link_args = ctx.actions.declare_output(prefix, "final_link.args"),
        link_plan = ctx.actions.declare_output(prefix, "link_plan.json"),
    )
    run_plan(ctx, toolchain, name, collected, driver, link.link_plan, link.final_link_args)
    for i in range(len(link.objects)):
        opt_object(ctx, toolchain, link, i)
    for i in range(len(link.archives)):
        opt_archive(ctx, toolchain, link, i)
    final_link(ctx, toolchain, link, driver, out)
    return out
