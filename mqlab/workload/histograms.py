"""Bulk (vectorized) HdrHistogram recording for the workers.

The pure-Python ``record_value`` costs ~1.4 us a call, so values are recorded
in bulk: bucket indices are computed with numpy and added into the histogram's
counts array in place. The histogram's shape is the archive's
(:func:`mqlab.archive.codecs.new_histogram`).
"""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram

from mqlab.archive.codecs import HIGHEST_US, new_histogram

_EMPTY_MIN = HdrHistogram(1, 2, 1).min_value  # sys.maxsize, as hdrh starts
CHUNK = 8192  # values indexed at a time


class BulkHistogram:
    """An ``hdrh`` histogram that records numpy arrays of values in one step.

    Values below 0 are recorded as 0 and values above the range as its highest value;
    both are counted (``below_zero``, ``above_max``), never dropped.
    """

    def __init__(self) -> None:
        self.hist = new_histogram()
        h = self.hist
        self._counts = np.frombuffer(h.counts, dtype=np.int64)
        self._unit_mag = h.unit_magnitude
        self._shcm = h.sub_bucket_half_count_magnitude
        self._half = h.sub_bucket_half_count
        self._mask = h.sub_bucket_mask
        self.below_zero = 0
        self.above_max = 0

    def counts_index(self, values: np.ndarray) -> np.ndarray:
        """Each value's index into the counts array (values within 0..HIGHEST_US)."""
        v = values.astype(np.int64, copy=False)
        # the bit length of (v | sub-bucket mask), from its float64 exponent: exact, as
        # HIGHEST_US < 2**53
        e = (v | self._mask).astype(np.float64).view(np.int64)
        e >>= 52  # the biased exponent: bit length + 1022
        e -= 1023 + self._shcm  # bucket + unit magnitude: how far v's sub-bucket is shifted
        sub = v >> e
        e -= self._unit_mag - 1  # bucket + 1
        e <<= self._shcm
        e += sub
        e -= self._half
        return e

    def record(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Record ``values`` (us); ``weights`` gives each value's count (default 1)."""
        if values.size == 0:
            return
        v = np.asarray(values, dtype=np.int64)
        lo, hi = int(v.min()), int(v.max())
        w = None if weights is None else np.asarray(weights, dtype=np.int64)
        if lo < 0 or hi > HIGHEST_US:
            ones = np.ones(v.size, np.int64) if w is None else w
            self.below_zero += int(ones[v < 0].sum())
            self.above_max += int(ones[v > HIGHEST_US].sum())
            v = np.clip(v, 0, HIGHEST_US)
            lo, hi = max(lo, 0), min(hi, HIGHEST_US)
        counts = self._counts
        # in chunks: the temporaries stay small (in cache, off the allocator's mmap path)
        for at in range(0, v.size, CHUNK):
            idx = self.counts_index(v[at : at + CHUNK])
            if w is None:
                add = np.bincount(idx)  # up to the largest index only
            else:
                add = np.bincount(idx, weights=w[at : at + CHUNK]).astype(np.int64)
            counts[: add.size] += add
        h = self.hist
        h.total_count += int(v.size) if w is None else int(w.sum())
        h.min_value = min(h.min_value, lo)
        h.max_value = max(h.max_value, hi)

    def reset(self) -> None:
        self._counts[:] = 0
        h = self.hist
        h.total_count = 0
        h.min_value = _EMPTY_MIN
        h.max_value = 0

    @property
    def total(self) -> int:
        return int(self.hist.total_count)
