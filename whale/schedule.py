"""Which phase runs next. Fixed alternation: E weight steps, then I search iterations, repeated."""

from __future__ import annotations

from dataclasses import asdict, dataclass

WEIGHTS, HARNESS = "weights", "harness"


@dataclass
class ScheduleState:
    kind: str  # the phase now running: "weights" or "harness"
    phase: int = 0  # index of that phase
    done_in_phase: int = 0  # units finished in it

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FixedAlternation:
    weight_steps: int  # E
    search_iters: int  # I
    start: str = WEIGHTS

    def initial(self) -> ScheduleState:
        return ScheduleState(kind=self.start)

    def length(self, kind: str) -> int:
        return self.weight_steps if kind == WEIGHTS else self.search_iters

    def advance(self, state: ScheduleState) -> tuple[ScheduleState, bool]:
        """Record one finished unit; returns the next state and whether a phase boundary was crossed."""
        done = state.done_in_phase + 1
        if done < self.length(state.kind):
            return ScheduleState(state.kind, state.phase, done), False
        other = HARNESS if state.kind == WEIGHTS else WEIGHTS
        return ScheduleState(other, state.phase + 1, 0), True
