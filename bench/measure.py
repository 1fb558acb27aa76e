"""Interleaved sampling: every case of a sweep runs once per iteration, round after round.

Interleaving makes drift (other processes, the WAL writer, a checkpoint) hit
every case alike, so that the ratios stay meaningful on a busy machine. A
sweep's figure is the median over rounds of each round's median, and its
spread is the range of the round medians: the noise, shown.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# One sample: runs the case once and returns how long the timed part took, in seconds.
Sample = Callable[[], float]


@dataclass
class Series:
    """The samples of one case, by round."""

    rounds: list[list[float]] = field(default_factory=list)

    def medians(self) -> list[float]:
        return [statistics.median(samples) for samples in self.rounds]

    @property
    def median(self) -> float:
        return statistics.median(self.medians())

    @property
    def spread(self) -> tuple[float, float]:
        medians = self.medians()
        return min(medians), max(medians)

    @property
    def count(self) -> int:
        return sum(len(samples) for samples in self.rounds)


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def sweep(
    cases: Mapping[str, Sample], rounds: int, per_round: int, warmup: int = 20
) -> dict[str, Series]:
    """Run ``cases`` interleaved: ``rounds`` rounds of ``per_round`` iterations each."""
    for _ in range(warmup):
        for sample in cases.values():
            sample()
    series = {name: Series() for name in cases}
    for _ in range(rounds):
        for one in series.values():
            one.rounds.append([])
        for _ in range(per_round):
            for name, sample in cases.items():
                series[name].rounds[-1].append(sample())
    return series


def per_round(combine: Callable[..., float], *inputs: Series) -> Series:
    """A derived figure computed within each round (a difference, a ratio), as a series."""
    return Series(
        [[combine(*medians)] for medians in zip(*(s.medians() for s in inputs), strict=True)]
    )
