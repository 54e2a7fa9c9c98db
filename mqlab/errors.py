"""One family of errors for user mistakes and environment problems.

The CLI prints ``str(err)`` on one line and exits 2 for any ``MqlabError``;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class MqlabError(Exception):
    """Base of every error that is the user's (or the environment's) to fix."""

    exit_code = 2


class ScenarioError(MqlabError):
    """A scenario or profile file is missing, malformed or impossible.

    Formats as ``FILE: KEY: PROBLEM (FIX)`` so the one line names file, field and fix.
    """

    def __init__(self, path: object, key: str | None, problem: str, fix: str | None = None):
        self.path = str(path)
        self.key = key
        self.problem = problem
        self.fix = fix
        where = f"{self.path}: {key}" if key else self.path
        text = f"{where}: {problem}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class DriverError(MqlabError):
    """A broker client failed in a way the user must act on (unreachable, misconfigured)."""


class ClusterError(MqlabError):
    """A local or remote cluster could not be started, checked or stopped."""


class ArchiveError(MqlabError):
    """A run archive is missing, unreadable or of an unsupported format version."""


class InfraError(MqlabError):
    """Terraform-driven lab environments could not be planned, created or destroyed."""


class FleetError(MqlabError):
    """Hosts of a multi-host lab could not be created, reached, set up or cleaned up."""
