"""One budget for every phase: rollouts spent (training and search), with tokens, calls and time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from whale.core.timing import snapshot
from whale.harness.records import Rollout


@dataclass
class Budget:
    limit_rollouts: int
    train_rollouts: int = 0
    search_rollouts: int = 0
    eval_rollouts: int = 0  # validation/test evaluation: recorded, not charged to the budget
    model_calls: int = 0
    generated_tokens: int = 0
    wall_s: float = 0.0
    parts_s: dict[str, dict[str, float]] = field(default_factory=dict)  # per unit and part, whale.core.timing

    @property
    def rollouts(self) -> int:
        return self.train_rollouts + self.search_rollouts

    @property
    def left(self) -> int:
        return max(0, self.limit_rollouts - self.rollouts)

    @property
    def exhausted(self) -> bool:
        return self.rollouts >= self.limit_rollouts

    def charge(self, rollouts: list[Rollout], kind: str) -> None:
        """kind is 'train', 'search' or 'eval'; every model call and token is counted."""
        setattr(self, f"{kind}_rollouts", getattr(self, f"{kind}_rollouts") + len(rollouts))
        self.model_calls += sum(len(r.calls) for r in rollouts)
        self.generated_tokens += sum(r.generated_tokens for r in rollouts)
        self.parts_s = snapshot()

    def to_json(self) -> dict:
        return asdict(self)
