# Every example program is built twice: `NAME` links with distributed ThinLTO,
# `NAME-inprocess` with LLD's in-process ThinLTO. Both must behave the same.

# The rules come through these macros, which declare nothing when this repository is a
# cell of a project on another prelude (//:project.bzl).

load("//:project.bzl", "ours")

def lto_binaries(name: str, **kwargs):
    if ours():
        native.cxx_binary(name = name, dist_lto = True, **kwargs)
        native.cxx_binary(name = name + "-inprocess", dist_lto = False, **kwargs)

def cxx_library(**kwargs):
    if ours():
        native.cxx_library(**kwargs)

def prebuilt_cxx_library(**kwargs):
    if ours():
        native.prebuilt_cxx_library(**kwargs)

def rust_staticlib(**kwargs):
    if ours():
        native.rust_staticlib(**kwargs)
