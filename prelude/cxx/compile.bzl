# Compiling C, C++ and assembly sources to objects: ThinLTO bitcode unless the
# target or the source says otherwise (`lto = False`, a per-source `-fno-lto`, or an
# assembly file, which is always native).

load("//toolchain.bzl", "LlvmToolchainInfo")
load(":providers.bzl", "label_key")

# Source languages by file extension; anything else is an error naming the file.
_LANGUAGES = {
    ".c": "c",
    ".cc": "c++",
    ".cpp": "c++",
    ".cxx": "c++",
    ".s": "asm",  # not preprocessed
    ".S": "asm",  # preprocessed assembly
}

CompiledObject = record(
    object = Artifact,
    # LLVM bitcode (compiled with -flto=thin): an input of the ThinLTO index step.
    bitcode = bool,
    # Compiled as C++: the link needs the C++ runtime.
    cxx = bool,
)

def _source_and_flags(entry: Artifact | (Artifact, list[str])) -> (Artifact, list[str]):
    """A `srcs` entry is a source or a (source, [flags]) pair, as in Buck2's cxx rules."""
    if type(entry) == "tuple":
        return entry[0], list(entry[1])
    return entry, []

def _object_name(src: Artifact) -> str:
    path = src.short_path
    return path[:len(path) - len(src.extension)] + ".o"

def compile_sources(
        ctx: AnalysisContext,
        toolchain: LlvmToolchainInfo,
        srcs: list,
        headers: list[Artifact],
        include_dirs: list[Artifact],
        flags: list[str],
        lto: bool) -> list[CompiledObject]:
    """One compile action per source; the objects in source order.

    Args:
        srcs: sources, or (source, per-source flags) pairs.
        headers: headers the sources may include (inputs of every compile).
        include_dirs: directories for `-I`.
        flags: the target's compiler flags (after the toolchain's).
        lto: compile to ThinLTO bitcode unless a source opts out with `-fno-lto`.
    """
    objects = []
    includes = [cmd_args(d, format = "-I{}") for d in include_dirs]
    for entry in srcs:
        src, src_flags = _source_and_flags(entry)
        language = _LANGUAGES.get(src.extension)
        if language == None:
            fail("{}: cannot compile `{}`: known extensions are {}".format(
                label_key(ctx.label),
                src.short_path,
                ", ".join(sorted(_LANGUAGES.keys())),
            ))
        bitcode = lto and language != "asm" and "-fno-lto" not in flags and "-fno-lto" not in src_flags
        obj = ctx.actions.declare_output("objects", _object_name(src))
        compiler = toolchain.clangxx if language == "c++" else toolchain.clang
        cmd = cmd_args(
            compiler,
            toolchain.compiler_flags,
            "-flto=thin" if bitcode else [],
            flags,
            src_flags,
            includes,
            "-c",
            src,
            "-o",
            obj.as_output(),
            hidden = headers,
        )
        ctx.actions.run(cmd, category = "cxx_compile", identifier = src.short_path)
        objects.append(CompiledObject(object = obj, bitcode = bitcode, cxx = language == "c++"))
    return objects

def header_dir(ctx: AnalysisContext, name: str, headers: list[Artifact]) -> list[Artifact]:
    """A directory of `headers` under their package-relative paths (for `-I`); [] if none."""
    if not headers:
        return []
    return [ctx.actions.symlinked_dir(name, {h.short_path: h for h in headers})]
