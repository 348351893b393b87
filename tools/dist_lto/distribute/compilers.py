"""How one worker thread runs its compilers: forked from a fork server of its own while
that works (`process/forkserver.py`), else started directly."""

from __future__ import annotations

from dist_lto import TYPE_CHECKING
from dist_lto.errors import DistLtoError
from dist_lto.process.children import run_tool

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dist_lto.process.forkserver import ForkServer


class WorkerCompiler:
    """How one worker thread runs compilers: forked from its own fork server while it has
    one that works (`forkserver.py`), else started directly."""

    def __init__(
        self,
        compiler: str,
        preload: str | None,
        on_trouble: Callable[[str], None],
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.compiler = compiler
        self.preload = preload
        self.env = env
        """The compilers' environment (None: this process's)."""
        self.on_trouble = on_trouble
        """Told why the worker gave its fork server up."""
        self.server: ForkServer | None = None
        self.forked = False
        """Whether the last `run` went through the fork server."""

    def start(self) -> None:
        """Start the fork server now, if there is to be one (`run` starts it otherwise)."""
        from dist_lto.process.forkserver import ForkServer

        if self.server is None and self.preload is not None:
            try:
                self.server = ForkServer(self.compiler, self.preload, self.env)
            except DistLtoError as err:
                self._give_up(err)

    def run(self, argv: list[str], on_start: Callable[[int], None] | None) -> tuple[int, bytes]:
        from dist_lto.process.forkserver import ForkServerLost

        self.start()
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

    def _give_up(self, err: DistLtoError) -> None:
        self.close()
        self.preload = None
        self.on_trouble(err.message)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
