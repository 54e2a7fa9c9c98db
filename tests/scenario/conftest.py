"""The scenario tests load scenarios that name a published set in ``[reference]``.

``mqlab.published.base._load_all`` lost its imports of the sets in the house's step 1 (so
``mqlab validate`` refuses every ``[reference]`` today); until it finds the sets again,
these tests load them here, as the report tests that ran before them used to."""

from mqlab.published import (  # noqa: F401 - each registers its set
    brokers_bench,
    mqperf2015,
    omb_paper,
    reference,
    treat,
)
