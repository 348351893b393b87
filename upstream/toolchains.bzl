# Every toolchain a C/C++ project on Buck2's upstream prelude needs for distributed
# ThinLTO with stock LLVM 22, in one call: what replaces `system_demo_toolchains()` in
# the `toolchains/BUCK` of a project made by `buck2 init` (docs/upstream-buck2.md).
# `system_cxx_toolchain` takes neither `internal_tools` nor `lto_mode`, so the C++
# toolchain here is upstream's `cxx_toolchain`, with LLVM named by path: nothing is
# downloaded, and a remote worker with LLVM 22 at the same path runs the same tools.

load("@prelude//cxx/dist_lto:tools.bzl", "dist_lto_tools")
load("@prelude//cxx/tools:defs.bzl", "cxx_internal_tools")
load("@prelude//toolchains:genrule.bzl", "system_genrule_toolchain")
load("@prelude//toolchains:python.bzl", "system_python_bootstrap_toolchain")

def _path_tool_impl(ctx: AnalysisContext) -> list[Provider]:
    return [DefaultInfo(), RunInfo(args = cmd_args(ctx.attrs.path))]

# A program named by its absolute path on every machine that runs actions.
dist_lto_path_tool = rule(
    impl = _path_tool_impl,
    attrs = {"path": attrs.string(doc = "the program's absolute path")},
)

_LLVM_TOOLS = ["clang", "clang++", "llvm-ar", "llvm-nm", "llvm-objcopy", "llvm-strip"]

def dist_lto_llvm_toolchains(
        llvm_bin: str = "/usr/lib/llvm-22/bin",
        python_bootstrap: str = "/usr/bin/python3",
        c_compiler_flags: list[str] = [],
        cxx_compiler_flags: list[str] = [],
        linker_flags: list[str] = [],
        visibility: list[str] = ["PUBLIC"],
        **cxx_toolchain_kwargs):
    """Declares, in the calling package, the toolchains upstream's rules look for:

    - `cxx`: upstream's `cxx_toolchain` for LLVM 22 (clang, LLD, llvm-ar), compiling
      ThinLTO bitcode (`lto_mode = "thin"`, `-O2`: without it the index step plans no
      imports), allowed to distribute (`supports_distributed_thinlto`), with our tools
      as its `internal_tools`' distributed ThinLTO tools (`dist_lto//upstream:*`), and
      the settings that matter outside Meta: `generate_linker_maps = False` (upstream's
      default selects on a package only Meta has) and `use_dep_files = True` (upstream's
      default outside Apple platforms is False, and then a header edit reruns every
      compile that could see the header, not only those that include it);
    - `python_bootstrap`: the prelude's own helper scripts, run by `python_bootstrap`;
    - `genrule`: the prelude's `genrule` toolchain.

    Args:
        llvm_bin: where clang, LLD and the LLVM tools are (Debian's LLVM 22 by default).
        python_bootstrap: the Python that runs the prelude's helpers, by absolute path
            (a remote worker has no PATH).
        c_compiler_flags: added after `-O2` to C compiles.
        cxx_compiler_flags: added after `-O2` to C++ compiles.
        linker_flags: added after `-fuse-ld=lld -O2` to links.
        visibility: of the three toolchains.
        **cxx_toolchain_kwargs: any other `cxx_toolchain` attribute (they win over ours:
            `split_debug_mode`, `archive_contents`, `link_style`, ...).
    """
    for tool in _LLVM_TOOLS:
        dist_lto_path_tool(name = tool, path = llvm_bin + "/" + tool)

    dist_lto_tools(
        name = "dist_lto_tools",
        copy = "dist_lto//upstream:copy",
        opt = {"gnu": "dist_lto//upstream:opt"},
        planner = {"gnu": "dist_lto//upstream:plan"},
        prepare = {"gnu": "dist_lto//upstream:prepare"},
    )

    cxx_internal_tools(
        name = "cxx_internal_tools",
        dist_lto = ":dist_lto_tools",
    )

    settings = dict(
        archiver = ":llvm-ar",
        archiver_type = "gnu",
        assembler = ":clang",
        c_compiler = ":clang",
        c_compiler_flags = ["-O2"] + c_compiler_flags,
        compiler_type = "clang",
        cxx_compiler = ":clang++",
        cxx_compiler_flags = ["-O2"] + cxx_compiler_flags,
        generate_linker_maps = False,
        internal_tools = ":cxx_internal_tools",
        link_style = "static",
        linker = ":clang++",
        linker_flags = ["-fuse-ld=lld", "-O2"] + linker_flags,
        linker_type = "gnu",
        lto_mode = "thin",
        nm = ":llvm-nm",
        objcopy_for_shared_library_interface = ":llvm-objcopy",
        strip = ":llvm-strip",
        supports_distributed_thinlto = True,
        use_dep_files = True,
    )
    settings.update(cxx_toolchain_kwargs)
    native.cxx_toolchain(name = "cxx", visibility = visibility, **settings)

    system_python_bootstrap_toolchain(
        name = "python_bootstrap",
        interpreter = python_bootstrap,
        visibility = visibility,
    )

    system_genrule_toolchain(
        name = "genrule",
        visibility = visibility,
    )
