load("@prelude//rust:rust_toolchain.bzl", "PanicRuntime", "RustToolchainInfo")

# A tool named by its path on every machine that runs actions (LLVM 22 is installed
# there): nothing is downloaded.

def _path_tool_impl(ctx: AnalysisContext) -> list[Provider]:
    return [DefaultInfo(), RunInfo(args = cmd_args(ctx.attrs.path))]

path_tool = rule(
    impl = _path_tool_impl,
    attrs = {"path": attrs.string()},
)

# Upstream's Rust toolchain record with rustc named by path (`[rust] rustc`): the
# prelude's `system_rust_toolchain` runs `rustc` from PATH, which is often rustup's
# proxy, and that needs the user's HOME, which Buck2 does not give actions.

def _rust_toolchain_impl(ctx: AnalysisContext) -> list[Provider]:
    return [
        DefaultInfo(),
        RustToolchainInfo(
            # Only for the [clippy] and [doc] subtargets, which these examples never build.
            clippy_driver = RunInfo(args = ["clippy-driver"]),
            rustdoc = RunInfo(args = ["rustdoc"]),
            compiler = ctx.attrs.rustc[RunInfo],
            default_edition = "2021",
            panic_runtime = PanicRuntime("unwind"),
            rustc_flags = ctx.attrs.rustc_flags,
            rustc_target_triple = "x86_64-unknown-linux-gnu",
        ),
    ]

rust_toolchain = rule(
    impl = _rust_toolchain_impl,
    attrs = {
        "rustc": attrs.exec_dep(providers = [RunInfo]),
        "rustc_flags": attrs.list(attrs.string(), default = []),
    },
    is_toolchain_rule = True,
)
