"""The base of every kernel-hub exception, and the one users catch around `get_kernel`.

`kernel-hub` prints any `KernelHubError` as one line `kernel-hub <command>: <message>` and exits with
its `exit_code` (1; 2 for usage errors, like argparse); `--debug` adds the traceback.
"""

from __future__ import annotations


class KernelHubError(Exception):
    """Something kernel-hub refused or could not do; the message says what and what to do instead."""

    exit_code = 1


class UsageError(KernelHubError):
    """The command line asks for something that cannot be done as given."""

    exit_code = 2


class KernelLoadError(KernelHubError, RuntimeError):
    """`get_kernel`: no variant could be used and the fallback was not allowed (or failed); lists every step."""
