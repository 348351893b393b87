# The rules every BUCK file of this project sees without a load() (Buck2 loads
# prelude//prelude.bzl implicitly).

load("//cxx:binary.bzl", _cxx_binary = "cxx_binary")
load("//cxx:library.bzl", _cxx_library = "cxx_library")
load("//cxx:prebuilt.bzl", _prebuilt_cxx_library = "prebuilt_cxx_library")
load("//rust:staticlib.bzl", _rust_staticlib = "rust_staticlib")
load("//toolchain.bzl", _llvm_toolchain = "llvm_toolchain")

cxx_binary = _cxx_binary
cxx_library = _cxx_library
prebuilt_cxx_library = _prebuilt_cxx_library
rust_staticlib = _rust_staticlib
llvm_toolchain = _llvm_toolchain

# The same rules for macros in .bzl files, under the name Buck2's upstream prelude gives
# its own: a macro of this repository tells which prelude it runs under by
# `hasattr(native, "llvm_toolchain")` (when the repository is a cell of a project on
# the upstream prelude, its own targets are not declared: docs/upstream-buck2.md).
native = struct(
    cxx_binary = _cxx_binary,
    cxx_library = _cxx_library,
    llvm_toolchain = _llvm_toolchain,
    prebuilt_cxx_library = _prebuilt_cxx_library,
    rust_staticlib = _rust_staticlib,
)
