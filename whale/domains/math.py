"""The math domain: seeded arithmetic word problems (or GSM8K JSONL), a safe calculator, exact-number scoring.

Problems are generated, not downloaded, so every split is reproducible from a seed and small enough in
numbers for a 135M model. Each problem is a chain of 1..3 operations whose canonical expression stays in gold.
"""

from __future__ import annotations

import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale.domains.base import SPLITS
from whale.domains.data_rows import read_rows
from whale.domains.math_tools import MathToolbox
from whale.domains.user_files import Skips
from whale.harness.task import Task

NAMES = (
    "Sam",
    "Mia",
    "Leo",
    "Ava",
    "Noah",
    "Emma",
    "Liam",
    "Zoe",
    "Omar",
    "Lily",
    "Ravi",
    "Nina",
    "Ben",
    "Maya",
    "Jack",
    "Sara",
    "Ivan",
    "Chloe",
    "Kai",
    "Ella",
)
OBJECTS = (
    "apples",
    "marbles",
    "stickers",
    "cookies",
    "pencils",
    "books",
    "coins",
    "shells",
    "cards",
    "stamps",
    "balloons",
    "beads",
    "oranges",
    "crayons",
    "toy cars",
)

# An opening states the first operation with two numbers {a} and {b}; a step applies one more operation
# with {b} to what {name} has so far. Templates must contain no digits of their own.
OPENINGS = {
    "+": (
        "{name} has {a} {obj} and buys {b} more.",
        "{name} had {a} {obj}. Then {friend} gave {name} {b} more.",
        "{name} collects {a} {obj} in the morning and {b} {obj} in the afternoon.",
    ),
    "-": (
        "{name} has {a} {obj} and gives {b} of them to {friend}.",
        "{name} had {a} {obj} but lost {b} of them.",
        "{name} has {a} {obj}. {friend} takes {b} of them.",
    ),
    "*": (
        "{name} has {a} boxes with {b} {obj} in each box.",
        "{name} buys {a} packs of {obj}. Each pack holds {b} {obj}.",
        "{name} lays out {a} rows of {obj} with {b} {obj} in each row.",
    ),
    "/": (
        "{name} splits {a} {obj} into {b} equal piles and keeps one pile.",
        "{name} has {a} {obj} and packs them equally into {b} bags, keeping one bag.",
        "{a} {obj} are shared equally by {b} friends, and {name} is one of them.",
    ),
}
STEPS = {
    "+": (
        "Then {name} buys {b} more.",
        "{friend} gives {name} {b} more {obj}.",
        "Later {name} finds {b} more.",
    ),
    "-": (
        "Then {name} gives {b} {obj} to {friend}.",
        "{name} loses {b} of them.",
        "Then {name} sells {b} of them.",
    ),
    "*": (
        "Then {name} ends up with {b} times as many {obj} as before.",
        "Then the number of {obj} {name} has is multiplied by {b}.",
        "Then {name}'s pile of {obj} grows to {b} times its size.",
    ),
    "/": (
        "Then {name} splits the {obj} into {b} equal piles and keeps one pile.",
        "{name} then shares them equally among {b} people and keeps one share.",
        "Then {name} packs them evenly into {b} boxes and keeps one box.",
    ),
}
QUESTIONS = (
    "How many {obj} does {name} have now?",
    "How many {obj} does {name} have in the end?",
    "How many {obj} does {name} end up with?",
)
MAX_VALUE = 999
DEFAULT_SIZES = {"train": 2000, "search": 32, "val": 32, "test": 64}
DEFAULT_LEVELS = {"train": [1, 2], "search": [1, 2], "val": [1, 2], "test": [1, 2]}


@dataclass(frozen=True)
class Problem:
    question: str
    answer: int
    expression: str
    level: int


def apply(op: str, x: int, b: int) -> int:
    return {"+": x + b, "-": x - b, "*": x * b, "/": x // b}[op]


def opening_numbers(rng: random.Random, op: str) -> tuple[int, int]:
    if op == "+":
        return rng.randint(2, 40), rng.randint(2, 40)
    if op == "-":
        a = rng.randint(5, 60)
        return a, rng.randint(2, a - 1)
    if op == "*":
        return rng.randint(2, 12), rng.randint(2, 12)
    b = rng.randint(2, 9)
    return b * rng.randint(2, 12), b


def step_choices(x: int) -> dict[str, list[int]]:
    """Operands each operation may take on `x` so the result stays a whole number in 1..MAX_VALUE."""
    return {
        "+": list(range(2, min(30, MAX_VALUE - x) + 1)),
        "-": list(range(2, x)),
        "*": [b for b in range(2, 6) if x * b <= MAX_VALUE],
        "/": [b for b in range(2, 10) if x % b == 0 and x // b >= 2],
    }


def generate_problem(rng: random.Random, level: int) -> Problem:
    """One word problem with exactly `level` operations; all intermediate values are positive integers."""
    if level not in (1, 2, 3):
        raise ValueError(f"math level must be 1, 2 or 3, got {level}")
    name, friend = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    op = rng.choice("+-*/")
    a, b = opening_numbers(rng, op)
    value = apply(op, a, b)
    expression, top = f"{a} {op} {b}", op
    sentences = [rng.choice(OPENINGS[op]).format(name=name, friend=friend, obj=obj, a=a, b=b)]
    for _ in range(level - 1):
        choices = {o: bs for o, bs in step_choices(value).items() if bs}
        op = rng.choice(sorted(choices))
        b = rng.choice(choices[op])
        if op in "*/" and top in "+-":
            expression = f"({expression})"
        expression, top, value = f"{expression} {op} {b}", op, apply(op, value, b)
        sentences.append(rng.choice(STEPS[op]).format(name=name, friend=friend, obj=obj, b=b))
    sentences.append(rng.choice(QUESTIONS).format(name=name, obj=obj))
    return Problem(" ".join(sentences), value, expression, level)


def generate_problems(
    seed: int | str, n: int, levels: list[int], exclude: set[str] | None = None
) -> list[Problem]:
    """`n` problems with distinct questions (none in `exclude`), levels taken round-robin from `levels`."""
    rng = random.Random(seed)
    seen = set(exclude or ())
    problems: list[Problem] = []
    attempts = 0
    while len(problems) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not generate {n} distinct math problems at levels {levels}")
        problem = generate_problem(rng, levels[len(problems) % len(levels)])
        if problem.question not in seen:
            seen.add(problem.question)
            problems.append(problem)
    return problems


def load_gsm8k_jsonl(path: str | Path, strict: bool = False) -> list[Task]:
    """GSM8K rows ({"question", "answer": "...#### N"}) as tasks. A malformed row is skipped with its
    path:line, summarised on stderr ("loaded N, skipped M (reasons)"); `strict` makes it an error."""
    tasks, skips = [], Skips()
    for where, row in read_rows(path)[1]:
        problem = row if isinstance(row, str) else _gsm8k_problem(row)
        if problem:
            skips.add(where, problem)
            continue
        solution, _, final = row["answer"].rpartition("####")
        tasks.append(
            Task(
                id=f"gsm8k-{len(tasks)}",
                inputs={"question": row["question"]},
                gold={
                    "answer": int(final.strip().replace(",", "").replace("$", "")),
                    "solution": solution.strip(),
                },
                meta={"source": "gsm8k"},
            )
        )
    skips.refuse_if_strict(strict, len(tasks))
    if not tasks:
        raise ValueError(f"{path}: no usable rows ({skips.summary(0)})")
    skips.report(f"{path}: GSM8K rows", len(tasks))
    return tasks


def _gsm8k_problem(row: dict[str, Any]) -> str:
    if not isinstance(row.get("question"), str):
        return "no question (expected a string 'question')"
    if not isinstance(row.get("answer"), str) or "####" not in row["answer"]:
        return "no final answer (expected a string 'answer' ending in '#### <integer>')"
    final = row["answer"].rpartition("####")[2].strip().replace(",", "").replace("$", "")
    if not re.fullmatch(r"-?\d{1,100}", final):  # int() refuses over 4300 digits
        return f"final answer is not an integer ({final[:40]!r})"
    return ""


NUMBER = re.compile(r"(?:(?<![\d.])-)?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def last_number(text: str) -> float | None:
    """The last number written in `text` ("$1,200.0" -> 1200.0); a hyphen between digits is not a sign."""
    found = NUMBER.findall(text)
    if not found:
        return None
    return float(found[-1].replace("$", "").replace(",", ""))


BRIEF = """\
Math word problems. Each task gives task["question"], a short arithmetic word problem whose answer is a \
whole number. The harness `run(task, llm, tools) -> str` must return text whose last number is the answer.
Model: a small chat model (about 135M parameters) behind llm.chat(messages, max_tokens=None, \
temperature=None, stop=None, n=1); keep prompts short and plain, it follows long instructions badly.
Tools: tools.calculator(expression) evaluates numbers with + - * / // % ** and parentheses and returns the \
result as a string ("27", "2.5"); it raises on anything else (names, calls, huge numbers).
tools.python(code) runs a short Python snippet in its own sandbox (no files, no network, a few seconds) \
and returns what it printed; it raises with the error message when the code fails.
Rules: do not hard-code answers or recognize specific questions; the returned answer must be a number \
(digits, no words); score is 1 for the exact number, 0 otherwise."""

KNOB_POOL: dict[str, list[Any]] = {
    "SYSTEM_PROMPT": [
        "You are a helpful assistant. Solve the math problem.",
        "You are a careful math tutor. Think step by step.",
        "Solve the word problem. Work out each step, then give the final number.",
        "You are good at arithmetic. Read the problem and compute the answer.",
        "Solve the problem step by step and end with: The answer is <number>.",
    ],
    "INSTRUCTION": [
        "Answer with a number.",
        "Think step by step, then write: The answer is <number>.",
        "Give only the final number.",
        "Show the calculation, then the final answer as a number.",
        "End your reply with the answer as a number.",
    ],
    "CALC_INSTRUCTION": [
        "Write one arithmetic expression that computes the answer, as: Expression: <expression>",
        "Do not solve it. Write only: Expression: <arithmetic expression>",
        "Turn the problem into one math expression using the numbers. Reply: Expression: <expression>",
        "Write the calculation as one line: Expression: <numbers and + - * />",
        "Which calculation answers this? Reply with one line: Expression: <expression>",
    ],
    "RETRY_PROMPT": [
        "That did not work. Try again.",
        "Please answer again, following the format exactly.",
        "Your answer could not be read. Reply in the requested format.",
        "Try again. Use only numbers and + - * / in the expression.",
        "Something went wrong. Give the answer again, briefly.",
    ],
    # The example knobs are swapped one at a time, so every variant describes the same sum: 3 * 4 - 2 = 10.
    "EXAMPLE_QUESTION": [
        "Tom has 3 bags with 4 apples in each bag. He eats 2 apples. How many apples are left?",
        "Ann buys 3 packs of 4 cards and gives 2 cards away. How many cards does Ann have?",
        "A shop has 3 boxes with 4 pens in each box. It sells 2 pens. How many pens are left?",
        "Max makes 3 rows of 4 coins, then loses 2 coins. How many coins does Max have?",
        "Eva has 3 jars with 4 shells each. She gives 2 shells to Ben. How many shells does Eva have now?",
    ],
    "EXAMPLE_ANSWER": [
        "3 * 4 = 12 and 12 - 2 = 10. The answer is 10.",
        "Step 1: 3 * 4 = 12. Step 2: 12 - 2 = 10. Answer: 10",
        "3 * 4 - 2 = 10. The answer is 10.",
        "3 groups of 4 is 12, and 12 minus 2 is 10. The answer is 10.",
        "10",
    ],
    "EXAMPLE_EXPRESSION": [
        "Expression: 3 * 4 - 2",
        "3 groups of 4, minus 2.\nExpression: 3 * 4 - 2",
        "Expression: (3 * 4) - 2",
        "Multiply 3 by 4, then subtract 2.\nExpression: 3 * 4 - 2",
    ],
}


class MathDomain:
    """Procedurally generated arithmetic word problems; splits are disjoint by question text."""

    name = "math"
    brief = BRIEF

    def __init__(
        self,
        seed: int = 0,
        sizes: dict[str, int] | None = None,
        levels: dict[str, list[int]] | None = None,
        gsm8k_path: str | None = None,
        python_timeout_s: float = 5.0,
        strict: bool = False,
        allow_short: bool = False,
    ):
        unknown = (set(sizes or {}) | set(levels or {})) - set(SPLITS)
        if unknown:
            raise ValueError(f"unknown math splits {sorted(unknown)}; expected {list(SPLITS)}")
        self.seed = seed
        self.sizes = {**DEFAULT_SIZES, **(sizes or {})}
        self.levels = {**DEFAULT_LEVELS, **(levels or {})}
        for split, lv in self.levels.items():
            if not lv or any(level not in (1, 2, 3) for level in lv):
                raise ValueError(f"math levels for {split} must be a non-empty list of 1, 2, 3; got {lv}")
        self.python_timeout_s = python_timeout_s
        self._splits: dict[str, list[Task]] | None = None
        if gsm8k_path is not None:
            self._splits = split_loaded(load_gsm8k_jsonl(gsm8k_path, strict), self.sizes, seed, allow_short)

    def splits(self) -> dict[str, list[Task]]:
        """Evaluation splits are drawn first, so their content does not depend on the train size."""
        if self._splits is None:
            seen: set[str] = set()
            out: dict[str, list[Task]] = {}
            for split in ("test", "val", "search", "train"):
                key = f"math:{self.seed}:{split}"
                problems = generate_problems(key, self.sizes[split], self.levels[split], seen)
                seen.update(p.question for p in problems)
                out[split] = [
                    Task(
                        id=f"math-{split}-{i}",
                        inputs={"question": p.question},
                        gold={"answer": p.answer, "expression": p.expression},
                        meta={"level": p.level},
                    )
                    for i, p in enumerate(problems)
                ]
            self._splits = {split: out[split] for split in SPLITS}
        return self._splits

    def seed_harness(self) -> str:
        return (Path(__file__).parent / "harnesses" / "math_seed.py").read_text(encoding="utf-8")

    def toolbox(self, task: Task) -> MathToolbox:
        return MathToolbox(self.python_timeout_s)

    def verify(self, task: Task, answer: str | None, toolbox: Any) -> float:
        """1.0 when the last number in the answer equals the gold integer; anything unreadable scores 0."""
        if answer is None:
            return 0.0
        value = last_number(str(answer))
        return 1.0 if value is not None and value == task.gold["answer"] else 0.0

    def knob_pool(self) -> dict[str, list[Any]]:
        return {knob: list(values) for knob, values in KNOB_POOL.items()}


def split_loaded(
    tasks: list[Task], sizes: dict[str, int], seed: int, allow_short: bool = False
) -> dict[str, list[Task]]:
    """Deal loaded tasks into disjoint splits: deduplicated by question, shuffled by seed, evaluation
    splits filled first (they must be complete), train takes what is left up to its size (a shorter
    train is an error unless `allow_short`); the sizes used go to stderr."""
    unique = list({t.inputs["question"]: t for t in tasks}.values())
    random.Random(f"math-file:{seed}").shuffle(unique)
    out: dict[str, list[Task]] = {}
    start = 0
    for split in ("test", "val", "search", "train"):
        chunk = unique[start : start + sizes[split]]
        if split != "train" and len(chunk) < sizes[split]:
            raise ValueError(f"only {len(unique)} distinct questions: not enough for the {split} split")
        if split == "train" and len(chunk) < sizes[split] and not allow_short:
            raise ValueError(
                f"train gets {len(chunk)} of the {sizes[split]} questions asked for "
                "(set domain.sizes lower, or domain.options.allow_short: true)"
            )
        start += len(chunk)
        out[split] = [
            Task(f"math-{split}-{i}", t.inputs, t.gold, {**t.meta, "file": t.id}) for i, t in enumerate(chunk)
        ]
    print("whale: math splits used: " + ", ".join(f"{s} {len(out[s])}" for s in SPLITS), file=sys.stderr)
    return {split: out[split] for split in SPLITS}
