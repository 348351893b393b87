"""The opt worker: one long-lived process that runs the opt actions of a Buck2 build.

Buck2 starts it once per build command for the `WorkerInfo` our toolchain returns and
sends it each opt action's arguments over gRPC (`server.py`, on the unix socket named
by `WORKER_SOCKET`, served by `http2.py` with the standard library); each request runs
exactly as `dist-lto opt` would (`requests.py`), its backend run in a long-lived
compile server (`process/cc1server.py`) or forked from a waiting clang
(`process/forkserver.py`) instead of started. It runs the links' plan actions too, each
in a child forked from a planner that imported the planner once (`plans.py`).
Remote execution, or Buck2 with workers off, runs `dist-lto opt` itself: docs/buck2.md.
"""
