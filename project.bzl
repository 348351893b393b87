# What this repository declares as a Buck2 project of its own (its root BUCK and
# examples/): only under our prelude. When the repository is the `dist_lto` cell of a
# project on Buck2's upstream prelude (docs/upstream-buck2.md), these declare nothing,
# so that `buck2 targets dist_lto//...` parses every package: that project has its own
# toolchains, and our examples are written for our rules.

def ours() -> bool:
    """Whether the prelude is this repository's (it exports `llvm_toolchain`)."""
    return hasattr(native, "llvm_toolchain")

def llvm_toolchain(**kwargs):
    if ours():
        native.llvm_toolchain(**kwargs)
