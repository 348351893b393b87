# Every example program is built twice: `NAME` links with distributed ThinLTO,
# `NAME-inprocess` with LLD's in-process ThinLTO. Both must behave the same.

load("@prelude//:prelude.bzl", "cxx_binary")

def lto_binaries(name: str, **kwargs):
    cxx_binary(name = name, dist_lto = True, **kwargs)
    cxx_binary(name = name + "-inprocess", dist_lto = False, **kwargs)
