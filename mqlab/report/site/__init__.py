"""``mqlab site``: the run archives of a results directory as a static website.

An index of runs (sortable, filterable) with the durability matrix of the runs that
injected faults, a page per run with its plots, delivery figures, faults, scenario and
manifest, and a comparison page with the mqperf 2021 published rows. The
figures are those of ``mqlab ls`` (:mod:`mqlab.report.listing`), of the report
(the run's summary tables) and of ``mqlab compare`` (:mod:`mqlab.report.compare`);
the plots are drawn by :mod:`mqlab.report.plots`. The site is plain HTML, one
CSS and one JavaScript file, and PNGs, linked relatively: it opens from disk (file://)
and serves from any static host.
"""

from mqlab.report.site.build import SiteError, SiteResult, write_site

__all__ = ["SiteError", "SiteResult", "write_site"]
