"""Distributed ThinLTO tools for Clang/LLD.

This file stays empty of imports on purpose: `dist-lto opt` runs once per
module, often on a remote worker, and must load nothing it does not use.
"""
