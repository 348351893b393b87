# Phase 4: the final link, a dynamic_output reading the link plan: the planner's
# argument file names the optimised objects, the native objects and the native
# archive members in the original link order; this action depends on exactly the
# files the plan says the link uses. Run locally with the opt worker, the worker runs
# the linker itself on the line the driver would give it (`link_executable`).

load(":formats.bzl", "read_link_plan")
load(":tools.bzl", "DistLtoTools", "link_executable")
load(":types.bzl", "DistLink")

def final_link(
        ctx: AnalysisContext,
        tools: DistLtoTools,
        link: DistLink,
        driver_command,
        out: Artifact) -> None:
    def link_it(ctx: AnalysisContext, artifacts, outputs) -> None:
        plan = read_link_plan(artifacts, link.link_plan)
        inputs = list(link.static_inputs)
        inputs += [link.objects[i].opt for i in plan["bitcode_objects"]]
        inputs += [link.objects[i].object for i in plan["native_objects"]]
        for entry in plan["archives"]:
            archive = link.archives[entry["index"]]
            inputs.append(archive.opt_dir)
            if archive.objects_dir:
                inputs.append(archive.objects_dir)
        cmd = cmd_args(
            driver_command,
            "-o",
            outputs[out].as_output(),
            cmd_args(link.final_link_args, format = "@{}"),
            hidden = inputs,
        )
        exe = link_executable(tools)
        if exe != None:
            ctx.actions.run(cmd, category = "thin_lto_link", identifier = out.basename, exe = exe)
        else:
            ctx.actions.run(cmd, category = "thin_lto_link", identifier = out.basename)

    ctx.actions.dynamic_output(dynamic = [link.link_plan], outputs = [out.as_output()], f = link_it)
