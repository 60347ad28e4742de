"""Exceptions with meaning: each carries the one-line message a person sees and an exit code."""

from __future__ import annotations


class GenbenchError(Exception):
    """An error genbench explains in one line and exits with `exit_code`."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(GenbenchError):
    """Bad input from the user: a flag value, a file, a line of a file."""

    exit_code = 2


class InputFileError(UsageError):
    """Bad content in an input file; names the file, line and field."""

    def __init__(self, path: object, line: int | None, problem: str, field: str | None = None):
        where = f"{path}" + (f", line {line}" if line is not None else "")
        what = f"field '{field}': {problem}" if field else problem
        super().__init__(f"{where}: {what}")
        self.path, self.line, self.field = path, line, field
