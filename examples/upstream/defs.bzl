# Each program twice: `NAME` links with upstream's distributed ThinLTO (our tools),
# `NAME-inprocess` with LLD's in-process ThinLTO. Both must behave the same.

def program(name: str, **kwargs):
    native.cxx_binary(name = name, enable_distributed_thinlto = True, **kwargs)
    native.cxx_binary(name = name + "-inprocess", enable_distributed_thinlto = False, **kwargs)
