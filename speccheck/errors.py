"""The exit-code contract as exception types (README, "Exit codes").

0 = the job ran, its verdict is positive, printed and written;
1 = a defect was found (a verifier or sampler is not exact, or a measurement contradicts theory);
2 = the job could not be run as asked.

Library code raises these; the command maps them to exit codes and prints the message, which
must name the option, file or input at fault and what is allowed.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_DEFECT = 1
EXIT_CANNOT_RUN = 2


class SpeccheckError(Exception):
    """Base class: the job could not be run as asked (exit code 2)."""

    exit_code = EXIT_CANNOT_RUN


class InputError(SpeccheckError, ValueError):
    """An argument or option is outside its domain; the message names it and what is allowed."""


class UsageError(InputError):
    """A command-line option is bad (kept as a separate name for the CLI's own checks)."""


class LoadError(SpeccheckError, ValueError):
    """A verifier, target, suite or store cannot be loaded; the message names it."""


class FileFormatError(SpeccheckError, ValueError):
    """A file exists but is corrupt, truncated or of another schema; the message names the file."""


class IsolatedCodeError(SpeccheckError):
    """User-supplied code exited, crashed, hung or ran out of memory in its isolated process."""


class DeviceError(SpeccheckError):
    """The requested device is missing or invalid, or ran out of memory."""


class DefectError(SpeccheckError):
    """Judging found a defect in the code that ran (exit code 1): a run that breaks what every run
    of Algorithm 1 obeys, or a verifier declaring an acceptance law no exact rule has. Raised
    where no per-test verdict can carry it; the message names what was broken."""

    exit_code = EXIT_DEFECT
