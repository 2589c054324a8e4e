"""What the publisher refuses: a build that cannot be made, a publish that must not happen."""

from __future__ import annotations

from registry.errors import KernelHubError


class BuildError(KernelHubError, RuntimeError):
    """A variant could not be built; the message says which and what to do."""


class PublishError(KernelHubError, RuntimeError):
    """The publish was refused or failed; nothing was moved. The message says what to do."""


class VersionMoved(PublishError):
    """vN changed between the start of this publish and the swap: another publish won the race."""


class ApiChanged(PublishError):
    """The dist's public API differs from the one at the current vN head: it needs vN+1."""
