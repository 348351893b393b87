"""Lua's link as a build system would plan it: its main object on the link line and its
library as an archive prepared by `dist-lto prepare` (at `prep/lua/manifest.json`)."""

from __future__ import annotations

from support import workloads

LUA_MANIFEST = "prep/lua/manifest.json"
PREPARE_ARGV = ["prepare", "--archive", "liblua.a", "--objects-out", "prep/lua/objects",
                "--manifest-out", LUA_MANIFEST]  # fmt: skip
"""`dist-lto prepare` of `liblua.a` (the library's objects) into the manifest `lua_meta` names."""


def lua_meta(build: workloads.Build) -> dict[str, object]:
    """Lua's link: its main object, its library as a prepared archive, `-lm`."""
    objects = [
        {"kind": "object", "index": i, "path": path, "index_output": f"out/index/{path}.thinlto.bc",
         "plan_output": f"out/plans/{i}.json", "opt_output": f"out/opt/{i}.o"}
        for i, path in enumerate(build.main)
    ]  # fmt: skip
    archive = {"kind": "archive", "index": 0, "manifest": LUA_MANIFEST,
               "plan_output": "out/archive-plans/0.json", "index_dir": "out/archive-index/0",
               "opt_objects_dir": "out/archive-opt/0"}  # fmt: skip
    return {"version": 1, "index_dir": "out/index", "link_plan_output": "out/link-plan.json",
            "final_link_args_output": "out/final-link.args",
            "groups": [{"linkables": objects}, {"linkables": [archive]},
                       {"linkables": [{"kind": "args", "args": build.link_flags}]}]}  # fmt: skip
