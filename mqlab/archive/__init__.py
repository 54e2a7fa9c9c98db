"""The run archive: the one home of its format (see docs/archive-format.md).

Everything that writes or reads a run directory goes through this package:
workers (interval logs, counts, bitmaps, records), the coordinator (manifest,
undrained), the summary (typed readers), reports and test fixtures.

- ``formats``   format versions, JSON records (atomic write, versioned read)
- ``layout``    run directory naming, file names, listing runs and workers
- ``codecs``    histogram shape, 64-bit bitmaps, ``counts.csv``
- ``hlog``      HdrHistogram interval logs: writer and tolerant reader
- ``records``   typed readers of worker, sent, delivery and undrained records
- ``manifest``  what produced a run (versions, host, clock)
- ``faultlog``  the manifest's fault log: its actions, partition kinds, entries
"""
