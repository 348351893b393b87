load("@dist_lto//upstream:cxx_binary.bzl", "dist_lto_cxx_binary")

# Each program three times: `NAME` links with upstream's distributed ThinLTO (our
# tools), `NAME-fine` with our own phases over the same upstream libraries
# (dist_lto_cxx_binary), `NAME-inprocess` with LLD's in-process ThinLTO. All three must
# behave the same.

def program(name: str, **kwargs):
    native.cxx_binary(name = name, enable_distributed_thinlto = True, **kwargs)
    native.cxx_binary(name = name + "-inprocess", enable_distributed_thinlto = False, **kwargs)
    dist_lto_cxx_binary(name = name + "-fine", **kwargs)
