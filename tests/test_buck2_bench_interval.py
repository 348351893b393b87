"""The Buck2 bench's interval for its headline ratio (bench/buck2.py `paired_interval`),
on hand-made wall times whose answers can be worked out by hand."""

from __future__ import annotations

import statistics
import sys

import pytest
from support.tools import REPO

sys.path.insert(0, str(REPO / "bench"))  # what is tested here is the benchmark's report
import buck2 as bench


def test_a_pace_that_moves_both_variants_alike_leaves_no_width() -> None:
    paces = [1.0, 1.9, 1.3, 0.8, 1.6, 1.1]  # the machine's pace, round by round
    theirs = [[5.0 * p for p in paces], [12.0 * p for p in paces]]
    ours = [[t * 1.04 for t in workload] for workload in theirs]
    assert bench.paired_interval(ours, theirs) == pytest.approx((1.04, 1.04))


def test_rounds_that_scatter_give_an_interval_around_the_headline_the_same_each_time() -> None:
    theirs = [[5.0] * 8, [12.0] * 8]
    ours = [[5.0 * r for r in (0.95, 1.0, 1.1, 1.02, 0.98, 1.15, 1.05, 1.0)], [12.6] * 8]
    headline = sum(statistics.median(w) for w in ours) / sum(statistics.median(w) for w in theirs)
    low, high = bench.paired_interval(ours, theirs)
    assert low < headline < high
    assert (low, high) == bench.paired_interval(ours, theirs)  # seeded: a report reproduces
    assert low >= (5.0 * 0.95 + 12.6) / 17.0 and high <= (5.0 * 1.15 + 12.6) / 17.0
