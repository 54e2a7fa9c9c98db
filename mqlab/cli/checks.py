"""The scenario checks that live above the scenario package, registered with it
(:func:`mqlab.scenario.checks.register`) when the CLI is imported: the AWS lab's checks
(``mqlab.labs.aws.validate`` registers them itself) and that a ``[reference]`` names a
published set and one of its experiments (the published sets sit above the scenario)."""

from __future__ import annotations

import mqlab.labs.aws.validate  # noqa: F401 - registers the AWS checks
from mqlab.errors import ScenarioError
from mqlab.published import sets as published
from mqlab.scenario import checks
from mqlab.scenario.model import Scenario


def reference_known(scenario: Scenario) -> None:
    """``[reference]``: a known published data set and one of its experiments."""
    ref = scenario.reference
    if ref is None:
        return
    path = scenario.source
    if ref.set not in published.names():
        raise ScenarioError(
            path,
            "reference.set",
            f"unknown published data set {ref.set!r}",
            "one of: " + ", ".join(published.names()),
        )
    known = published.get(ref.set).experiments()
    if ref.experiment not in known:
        raise ScenarioError(
            path,
            "reference.experiment",
            f"{ref.set} has no experiment {ref.experiment!r}",
            "one of: " + ", ".join(sorted(known)),
        )


checks.register(reference_known)
