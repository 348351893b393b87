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
