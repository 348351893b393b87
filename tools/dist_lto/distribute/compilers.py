"""How one worker thread runs its compilers: in a compile server of its own where there
is one (`process/cc1server.py`), forked from a fork server of its own while that works
(`process/forkserver.py`), else started directly."""

from __future__ import annotations

import os
import signal

from dist_lto import TYPE_CHECKING
from dist_lto.errors import DistLtoError
from dist_lto.process.children import run_tool

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dist_lto.process.cc1server import Cc1Server
    from dist_lto.process.forkserver import ForkServer


_STOPS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""How the worker or the distributor stops a job (the compile server running it dies
with it); any other death of the server is the job's own doing."""
TALKATIVE = 3
"""Served jobs that printed warnings, at least half of those served, after which a
compiler's jobs are forked: each such job ran twice (served, then forked for clang's own
words), as every backend of a link whose modules all warn would."""


class WorkerCompiler:
    """How one worker thread runs compilers: in its own compile server when given one
    (`cc1server.py`; only clean runs are taken from it), forked from its own fork server
    while it has one that works (`forkserver.py`), else started directly."""

    def __init__(
        self,
        compiler: str,
        preload: str | None,
        on_trouble: Callable[[str], None],
        env: Mapping[str, str] | None = None,
        cc1: str | None = None,
        on_cc1_trouble: Callable[[str], None] | None = None,
    ) -> None:
        self.compiler = compiler
        self.preload = preload
        self.env = env
        """The compilers' environment (None: this process's)."""
        self.on_trouble = on_trouble
        """Told why the worker gave its fork server up."""
        self.server: ForkServer | None = None
        self.cc1 = cc1
        """The compile server's program (`cc1server.py`), if jobs may run in one."""
        self.on_cc1_trouble = on_cc1_trouble
        """Told why the worker gave its compile server up."""
        self.cc1_server: Cc1Server | None = None
        self.forked = False
        """Whether the last `run` went through a server (compile or fork server)."""
        self.served = False
        """Whether the last `run` ran in the compile server."""
        self.clean = 0
        self.talkative = 0
        """Jobs the compile server ran cleanly, and that succeeded but printed."""

    def start(self) -> None:
        """Start the compile server now, else the fork server, if there is to be one
        (`run` starts them otherwise)."""
        if self.cc1 is not None:
            self._start_served()
            if self.cc1_server is not None:
                return
        self._start_forking()

    def run(self, argv: list[str], on_start: Callable[[int], None] | None) -> tuple[int, bytes]:
        from dist_lto.process.forkserver import ForkServerLost

        self.served = False
        if self.cc1 is not None:
            served = self._run_served(argv, on_start)
            if served is not None:
                self.forked = True
                return served
        self._start_forking()
        if self.server is not None:
            try:
                status_and_stderr = self.server.run(argv, on_start)
            except ForkServerLost as err:  # the job has not begun: run it directly
                self._give_up(err)
            else:
                self.forked = True
                return status_and_stderr
        self.forked = False
        return run_tool(argv, on_start, self.env)

    def _start_forking(self) -> None:
        from dist_lto.process.forkserver import ForkServer

        if self.server is None and self.preload is not None:
            try:
                self.server = ForkServer(self.compiler, self.preload, self.env)
            except DistLtoError as err:
                self._give_up(err)

    def _start_served(self, options: tuple[str, ...] = ()) -> None:
        """Start a compile server for jobs with the LLVM options `options`, unless one is
        running for them; one running for others is ended."""
        from dist_lto.process.cc1server import Cc1Server

        if self.cc1_server is not None and self.cc1_server.options != options:
            self._close_served()
        if self.cc1_server is None and self.cc1 is not None:
            try:
                self.cc1_server = Cc1Server(self.compiler, self.cc1, self.env, options)
            except DistLtoError as err:
                self._give_up_served(err)

    def _run_served(
        self, argv: list[str], on_start: Callable[[int], None] | None
    ) -> tuple[int, bytes] | None:
        """The job's outcome from the compile server when it ran there cleanly, or as
        stopped when the server was killed under it; None: run it as a compiler."""
        from dist_lto.process.cc1server import llvm_options
        from dist_lto.process.forkserver import ForkServerLost, JobDeclined

        options = llvm_options(argv)
        for attempt in (1, 2):  # a server gone since its last job is started again once
            fresh = self.cc1_server is None or self.cc1_server.options != options
            self._start_served(options)
            if self.cc1_server is None:
                return None
            try:
                status, stderr = self.cc1_server.run(argv, on_start)
            except JobDeclined:
                return None
            except ForkServerLost as err:  # gone before the job began
                if fresh or attempt == 2:
                    self._give_up_served(err)
                    return None
                self._close_served()
                continue
            except DistLtoError:  # it ended during the job: stopped, or the job ended it
                ended = self._close_served()
                if os.WIFSIGNALED(ended) and os.WTERMSIG(ended) in _STOPS:
                    return -os.WTERMSIG(ended), b""
                return None
            if status == 0 and not stderr:
                self.served = True
                self.clean += 1
                return status, stderr
            self._close_served()  # a failure may leave state behind: start afresh
            if status == 0:
                self.talkative += 1
                if self.talkative >= TALKATIVE and self.talkative >= self.clean:
                    self._give_up_served(DistLtoError(
                        f"{self.talkative} of {self.talkative + self.clean} backends in the"
                        " compile server printed warnings (each then ran forked, for clang's"
                        " own words): forking every backend from now on"))  # fmt: skip
            return None
        return None

    def _give_up_served(self, err: DistLtoError) -> None:
        self._close_served()
        self.cc1 = None
        if self.on_cc1_trouble is not None:
            self.on_cc1_trouble(err.message)

    def _close_served(self) -> int:
        """End the compile server; its wait status."""
        server, self.cc1_server = self.cc1_server, None
        if server is None:
            return 0
        server.close()
        return server.ended

    def _give_up(self, err: DistLtoError) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        self.preload = None
        self.on_trouble(err.message)

    def close(self) -> None:
        self._close_served()
        if self.server is not None:
            self.server.close()
            self.server = None
