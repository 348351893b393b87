"""One exception type for every reportable failure, turned into output only by the CLI.

Standard library only: the `opt` path imports this.
"""

EXIT_INTERNAL = 1
"""A bug or an environment failure of our own (not the user's input)."""
EXIT_BAD_INPUT = 2
"""The input (archive, meta file, job file, flags) is malformed or inconsistent."""


class DistLtoError(Exception):
    """A failure reported as one line (`message`) plus optional `detail` text, with an exit status.

    `detail` carries what a tool printed (clang's stderr, say); the message stays one line.
    """

    status: int = EXIT_INTERNAL

    def __init__(self, message: str, *, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.message = " ".join(message.split("\n"))
        if status is not None:
            self.status = status
        self.detail = detail


class BadInput(DistLtoError):
    """The user's input is wrong: exit status 2."""

    status = EXIT_BAD_INPUT
