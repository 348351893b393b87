"""Distributed ThinLTO tools for Clang/LLD.

This file stays empty of imports on purpose: `dist-lto opt` runs once per
module, often on a remote worker, and must load nothing it does not use.
"""

TYPE_CHECKING = False
"""`typing.TYPE_CHECKING` for every module here (`from dist_lto import TYPE_CHECKING`):
the opt and distribute paths never import `typing`, whose import costs more than a
backend's whole Python start-up budget; type checkers treat any `TYPE_CHECKING` as true."""

__version__ = "0.2.0"
"""`dist-lto --version`; also part of the keys of results whose bytes depend on our
tools (the result cache, the remote result key)."""
