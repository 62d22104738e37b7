"""reasoning-gym's procedural task families as a whale domain (`domain=reasoning-gym`). Any dataset it
lists, or a weighted mix (its composite), with the generator's own settings; the reward is the
dataset's own `score_answer`. Needs the optional extra: pip install 'whale[gym]'.

Splits are disjoint: each draws from its own window of a million generator seeds (reasoning-gym seeds
item i with seed + i, so nearby seeds repeat items; numpy wants seeds below 2**32), and a question
already dealt to an earlier split is skipped. Task inputs hold the question only, plus the metadata
keys named in `expose`; the gold answer and the full entry stay in `Task.gold`, read by `verify` in
the parent.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from whale.domains.base import NoTools
from whale.harness.task import Task

DEFAULT_SIZES = {"train": 512, "search": 32, "val": 32, "test": 64}
DEALT = ("test", "val", "search", "train")  # evaluation splits first, so train size never changes them
EXTRA = 2.0  # items generated per task asked for, so duplicates can be skipped
# Datasets whose own score_answer cannot tell right from wrong (reasoning-gym 0.1.25): their gold answer
# does not score 1.0 (measured on 24 items each), or any answer does. A reward there would not mean what
# it says.
UNSUPPORTED = {
    name: "its gold answer does not score 1.0 under its own score_answer (several answers are valid)"
    for name in ("boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour")
} | {
    "game_of_life_halting": "any non-empty answer scores 1.0 under its own score_answer (it compares "
    "bool(answer) with bool(gold), and bool('False') is True)",
    "puzzle24": "a wrong answer scores 1.0 under its own score_answer (any four numbers in range that make "
    "24 pass: it does not check that they are the puzzle's)",
}


def gym_datasets() -> list[str]:
    """Every dataset name reasoning-gym lists, supported or not."""
    from reasoning_gym.factory import DATASETS

    return sorted(n for n in DATASETS if n != "composite")


class ReasoningGymDomain:
    name = "reasoning-gym"

    def __init__(
        self,
        seed: int = 0,
        sizes: dict[str, int] | None = None,
        dataset: str = "basic_arithmetic",
        config: dict[str, Any] | None = None,
        datasets: list[dict[str, Any]] | None = None,
        expose: list[str] | tuple[str, ...] = (),
    ):
        try:
            import reasoning_gym  # noqa: F401
        except ImportError:
            raise ValueError("reasoning-gym is not installed: pip install 'whale[gym]'") from None
        known = set(gym_datasets())
        specs = datasets or [{"name": dataset, "weight": 1.0, "config": config or {}}]
        for spec in specs:
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise ValueError(f"reasoning-gym datasets: each entry needs a name, got {spec!r}")
            if spec["name"] not in known:
                raise ValueError(
                    f"reasoning-gym has no dataset {spec['name']!r} (`whale domains` lists them)"
                )
            if spec["name"] in UNSUPPORTED:
                raise ValueError(
                    f"reasoning-gym dataset {spec['name']!r} is not supported: {UNSUPPORTED[spec['name']]}"
                )
        unknown = set(sizes or {}) - set(DEFAULT_SIZES)
        if unknown:
            raise ValueError(f"unknown splits {sorted(unknown)}; expected {list(DEFAULT_SIZES)}")
        self.seed, self.specs, self.expose = seed, specs, list(expose)
        self.sizes = {**DEFAULT_SIZES, **(sizes or {})}
        self.label = specs[0]["name"] if len(specs) == 1 else "+".join(s["name"] for s in specs)
        self.cached: dict[str, list[Task]] | None = None
        self.scorers: dict[str, Any] = {}
        self.brief = self._brief()  # completed with an example question once the splits are built

    def _generator(self, split: str, size: int) -> Any:
        base = int.from_bytes(hashlib.sha256(f"{self.seed}".encode()).digest()[:4], "big") % 1000
        seed = base * 4_000_000 + DEALT.index(split) * 1_000_000  # item i is seeded seed + i: windows apart
        try:
            return self._create(seed, size)
        except (TypeError, AssertionError, ValueError) as exc:  # the generator's own checks of its config
            raise ValueError(f"reasoning-gym {self.label} config: {type(exc).__name__}: {exc}") from None

    def _create(self, seed: int, size: int) -> Any:
        import reasoning_gym

        if len(self.specs) == 1:
            return reasoning_gym.create_dataset(
                self.specs[0]["name"], seed=seed, size=size, **self.specs[0].get("config", {})
            )
        from reasoning_gym.composite import DatasetSpec

        specs = [DatasetSpec(s["name"], float(s.get("weight", 1.0)), s.get("config", {})) for s in self.specs]
        return reasoning_gym.create_dataset("composite", seed=seed, size=size, datasets=specs)

    def splits(self) -> dict[str, list[Task]]:
        if self.cached is not None:
            return self.cached
        seen: set[str] = set()
        out: dict[str, list[Task]] = {}
        for split in DEALT:
            want = self.sizes[split]
            generator = self._generator(split, max(1, int(want * EXTRA) + 8))
            self.scorers[split] = generator
            tasks: list[Task] = []
            for i in range(len(generator)):
                if len(tasks) == want:
                    break
                entry = generator[i]
                if entry["question"] in seen:
                    continue
                seen.add(entry["question"])
                tasks.append(self._task(entry, split, len(tasks)))
            if len(tasks) < want:
                raise ValueError(
                    f"reasoning-gym {self.label}: only {len(tasks)} distinct questions for {split} "
                    f"(asked for {want}); lower domain.sizes or widen the generator's config"
                )
            out[split] = tasks
        self.cached = {split: out[split] for split in ("train", "search", "val", "test")}
        self.brief = self._brief()
        return self.cached

    def _task(self, entry: dict[str, Any], split: str, i: int) -> Task:
        meta = entry.get("metadata") or {}
        missing = [k for k in self.expose if k not in meta]
        if missing:
            raise ValueError(
                f"reasoning-gym {self.label}: expose names {missing}, not in the entries' metadata"
            )
        inputs = {"question": entry["question"], **{k: meta[k] for k in self.expose}}
        source = meta.get("source_dataset", self.label)
        return Task(
            f"{self.label}-{split}-{i}",
            inputs,
            {"answer": entry["answer"], "entry": entry, "split": split},
            {"dataset": source},
        )

    def _brief(self) -> str:
        example = self.cached["train"][0].inputs["question"] if self.cached and self.cached["train"] else ""
        scorer = self.scorers.get("test")
        docs = " ".join(((type(scorer).__doc__ or "") if scorer else "").split("\n\n")[0].split())
        keys = ", ".join(["question (str)", *self.expose])
        return (
            f"reasoning-gym dataset {self.label}: {docs or 'procedurally generated reasoning tasks'}. "
            f"Task inputs: {keys}. No tools. The answer string is scored by the dataset's own score_answer "
            "(1.0 = fully correct; some datasets give partial credit). Do not hard-code answers."
            + (f"\n\nExample question (train):\n{example[:1500]}\n" if example else "\n")
        )

    def seed_harness(self) -> str:
        return (Path(__file__).parent / "harnesses" / "gym_seed.py").read_text(encoding="utf-8")

    def toolbox(self, task: Task) -> NoTools:
        return NoTools()

    def verify(self, task: Task, answer: str | None, toolbox: Any) -> float:
        if not isinstance(answer, str):
            return 0.0
        scorer = self.scorers.get(task.gold.get("split", "test")) or next(iter(self.scorers.values()))
        score = scorer.score_answer(answer, task.gold["entry"])
        return min(1.0, max(0.0, float(score or 0.0)))

    def knob_pool(self) -> dict[str, list[Any]]:
        return {
            "INSTRUCTION": [
                "Give only the final answer, on one line, as: Answer: <answer>",
                "Think briefly, then end with a line: Answer: <answer>",
                "Reply with the answer only.",
            ],
            "MAX_TOKENS": [32, 64, 128, 256],
        }
