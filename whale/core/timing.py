"""Wall-clock totals per kind of unit (weight steps, search iterations, evaluations) and, inside each,
per part (engine, trainer, weight sync, rollouts), kept for the process.

The run stamps a snapshot into every record, so a bench or a person can split the wall time without
timers threaded through every call. A unit's "wall" excludes the units nested in it (an evaluation taken
inside a weight step counts as evaluation); a part counts in the innermost unit around it. Parts nest:
"rollouts" contains "engine" and vLLM's "weight sync" (the rest is sandbox, IPC and tools). Work in
other processes (Ray actors) is not seen here. Beside the seconds, a unit keeps counts of events that cost
time elsewhere (`counted`): "workers started", each a fresh sandbox process of about 0.1 CPU seconds that
competes with the engine for the cores.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

OUTSIDE = "outside units"
TOTALS: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
_units: list[list] = []  # [label, start, seconds spent in nested units]


@contextmanager
def unit(label: str) -> Iterator[None]:
    frame = [label, time.perf_counter(), 0.0]
    _units.append(frame)
    try:
        yield
    finally:
        _units.pop()
        elapsed = time.perf_counter() - frame[1]
        TOTALS[label]["wall"] += elapsed - frame[2]
        if _units:
            _units[-1][2] += elapsed


@contextmanager
def timed(part: str) -> Iterator[None]:
    label = _units[-1][0] if _units else OUTSIDE
    start = time.perf_counter()
    try:
        yield
    finally:
        TOTALS[label][part] += time.perf_counter() - start


def counted(part: str, n: int = 1) -> None:
    """Add `n` to a count kept in the innermost unit, beside its seconds."""
    TOTALS[_units[-1][0] if _units else OUTSIDE][part] += n


def restart(before: dict[str, dict[str, float]]) -> None:
    """Start a run's clocks from what its earlier sessions measured (a resumed run), or from zero."""
    TOTALS.clear()
    for label, parts in before.items():
        TOTALS[label].update(parts)


def snapshot() -> dict[str, dict[str, float]]:
    """Seconds so far in this process: unit label -> part -> seconds."""
    return {
        label: {part: round(s, 3) for part, s in sorted(parts.items())}
        for label, parts in sorted(TOTALS.items())
    }
