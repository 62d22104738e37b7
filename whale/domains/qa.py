"""`domain=qa`: question answering on a user's own file (data_rows.py reads JSONL, CSV, Parquet and
`datasets` folders). Columns are mapped by name; the verifier is one of:

  exact    normalised exact match (case, punctuation, articles and spacing ignored), against the answer
           or any of a list of answers
  numeric  the reply's last number within `tolerance` (relative, at least absolute) of the answer
  choice   multiple choice: the reply's letter (A, (B), "Answer: C") or the text of one choice
  regex    the stripped reply fully matches the answer taken as a pattern (case-insensitive)

Either one file split by seed (test, val, search, then train, by a hash of the seed and the question)
or one file per split (`files: {train: ..., test: ...}`). A bad row is skipped with `path:line: reason`
and counted in the summary printed on stderr; `strict` makes any skip an error, and a split shorter than
asked for is an error unless `allow_short`. Duplicate questions are dropped."""

from __future__ import annotations

import hashlib
import math
import re
import string
import sys
from pathlib import Path
from typing import Any

from whale.domains.base import NoTools
from whale.domains.data_rows import read_rows
from whale.domains.searchqa.text import normalize_answer
from whale.domains.user_files import Skips
from whale.harness.task import Task

VERIFIERS = ("exact", "numeric", "choice", "regex")
SPLITS_DEALT = ("test", "val", "search", "train")
DEFAULT_SIZES = {"train": 2000, "search": 32, "val": 32, "test": 64}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
LETTERS = string.ascii_uppercase
MAX_REPLY_CHARS = 10_000  # of a reply a regex is matched against


def last_number(text: str) -> float | None:
    found = NUMBER.findall(str(text))
    try:
        return float(found[-1].replace(",", "")) if found else None
    except ValueError:
        return None


def choice_index(reply: str, choices: list[str]) -> int | None:
    """The choice a reply names: a lone letter, '(B)', 'B.' or 'Answer: C', else the text of a choice."""
    text = str(reply).strip()
    marked = re.search(r"answer\s*(?:is|:)?\s*\(?([A-Za-z])\)?\b", text, re.IGNORECASE)
    lone = re.fullmatch(r"\(?([A-Za-z])[).:]?", text)
    letter = marked or lone
    if letter and letter.group(1).upper() in LETTERS[: len(choices)]:
        return LETTERS.index(letter.group(1).upper())
    by_text = [i for i, c in enumerate(choices) if normalize_answer(c) == normalize_answer(text)]
    return by_text[0] if len(by_text) == 1 else None


class QADomain:
    name = "qa"

    def __init__(
        self,
        seed: int = 0,
        sizes: dict[str, int] | None = None,
        path: str | None = None,
        files: dict[str, str] | None = None,
        question: str = "question",
        answer: str = "answer",
        choices: str | None = None,
        id: str | None = None,  # noqa: A002 - the column-mapping option's natural name
        verifier: str = "exact",
        tolerance: float = 1e-6,
        encoding: str = "auto",
        strict: bool = False,
        allow_short: bool = False,
    ):
        if (path is None) == (files is None):
            raise ValueError("qa needs either path (one file, split by seed) or files ({split: file})")
        if verifier not in VERIFIERS:
            raise ValueError(f"qa verifier must be one of {list(VERIFIERS)}, got {verifier!r}")
        if verifier == "choice" and not choices:
            raise ValueError("qa verifier 'choice' needs the choices column (domain.options.choices)")
        unknown = set(sizes or {}) - set(DEFAULT_SIZES) | set(files or {}) - set(DEFAULT_SIZES)
        if unknown:
            raise ValueError(f"unknown splits {sorted(unknown)}; expected {list(DEFAULT_SIZES)}")
        self.seed, self.path, self.files = seed, path, files
        self.columns = {"question": question, "answer": answer, "choices": choices, "id": id}
        self.verifier, self.tolerance, self.encoding = verifier, float(tolerance), encoding
        self.strict, self.allow_short = bool(strict), bool(allow_short)
        self.sizes = {**DEFAULT_SIZES, **(sizes or {})}
        keys = "question (str)" + (", choices (list of str)" if choices else "")
        self.brief = (
            f"Question answering on a user's dataset ({path or ', '.join(sorted((files or {}).values()))}). "
            f"Task inputs: {keys}. No tools. The reply is scored by the '{verifier}' verifier: "
            + {
                "exact": "normalised exact match with the answer (case, punctuation and articles ignored).",
                "numeric": f"the reply's last number must equal the answer within {self.tolerance:g}.",
                "choice": "the reply must name the right choice, by its letter (A, B, ...) or its text.",
                "regex": "the whole reply must match the answer's pattern.",
            }[verifier]
            + " Do not hard-code answers."
        )
        self.cached: dict[str, list[Task]] | None = None

    # ---- loading ----------------------------------------------------------------------------------------

    def _load(self, path: str) -> list[Task]:
        kind, rows = read_rows(path, self.encoding)
        tasks, skips = [], Skips()
        for where, row in rows:
            task = self._task(row) if isinstance(row, dict) else row
            if isinstance(task, str):
                skips.add(where, task)
            else:
                tasks.append(task)
        skips.refuse_if_strict(self.strict, len(tasks))
        skips.report(f"{path} ({kind}): rows", len(tasks))
        return tasks

    def _task(self, row: dict[str, Any]) -> Task | str:
        """The row as a task, or why it cannot be one."""
        col = self.columns
        question, answer = row.get(col["question"]), row.get(col["answer"])
        if not isinstance(question, str) or not question.strip():
            return f"no question (column {col['question']!r} missing or empty)"
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float, list)) or answer in ("", []):
            return f"no answer (column {col['answer']!r} missing or empty)"
        answers = [str(a) for a in answer] if isinstance(answer, list) else [str(answer)]
        inputs: dict[str, Any] = {"question": question}
        if col["choices"]:
            choices = row.get(col["choices"])
            if isinstance(choices, str):  # CSV: a JSON list, or choices separated by |
                choices = _choice_list(choices)
            if (
                not isinstance(choices, list)
                or len(choices) < 2
                or not all(isinstance(c, str) for c in choices)
            ):
                return f"bad choices (column {col['choices']!r}: a list of at least two strings)"
            inputs["choices"] = choices
        problem = self._answer_problem(answers, inputs.get("choices"))
        if problem:
            return problem
        key = str(row.get(col["id"])) if col["id"] and row.get(col["id"]) is not None else question
        return Task(key, inputs, {"answers": answers})

    def _answer_problem(self, answers: list[str], choices: list[str] | None) -> str:
        if self.verifier == "numeric" and any(last_number(a) is None for a in answers):
            return f"answer is not a number: {answers[0][:60]!r}"
        if self.verifier == "choice" and choice_index(answers[0], choices or []) is None:
            return f"answer names no choice: {answers[0][:60]!r}"
        if self.verifier == "regex":
            for a in answers:
                try:
                    re.compile(a)
                except re.error as exc:
                    return f"answer is not a valid pattern ({exc})"
        return ""

    def splits(self) -> dict[str, list[Task]]:
        if self.cached is not None:
            return self.cached
        if self.files is not None:
            loaded = {split: self._dedupe(self._load(str(self.files[split]))) if split in self.files else []
                      for split in SPLITS_DEALT}  # fmt: skip
        else:
            pool = self._dedupe(self._load(str(self.path)))
            pool.sort(
                key=lambda t: hashlib.sha256(f"{self.seed}:{t.inputs['question']}".encode()).hexdigest()
            )
            loaded, start = {}, 0
            for split in SPLITS_DEALT:
                loaded[split] = pool[start : start + self.sizes[split]]
                start += self.sizes[split]
        out = {}
        for split in ("train", "search", "val", "test"):
            tasks = loaded[split][: self.sizes[split]]
            if len(tasks) < self.sizes[split] and not self.allow_short:
                raise ValueError(
                    f"qa: {split} gets {len(tasks)} of the {self.sizes[split]} rows asked for "
                    "(set domain.sizes lower, or domain.options.allow_short: true)"
                )
            out[split] = [
                Task(f"qa-{split}-{i}", t.inputs, t.gold, {"row": t.id}) for i, t in enumerate(tasks)
            ]
        print("whale: qa splits used: " + ", ".join(f"{s} {len(out[s])}" for s in out), file=sys.stderr)
        self.cached = out
        return out

    @staticmethod
    def _dedupe(tasks: list[Task]) -> list[Task]:
        seen: set[str] = set()
        return [t for t in tasks if not (t.inputs["question"] in seen or seen.add(t.inputs["question"]))]

    # ---- the domain seam --------------------------------------------------------------------------------

    def seed_harness(self) -> str:
        return (Path(__file__).parent / "harnesses" / "qa_seed.py").read_text(encoding="utf-8")

    def toolbox(self, task: Task) -> NoTools:
        return NoTools()

    def verify(self, task: Task, answer: str | None, toolbox: Any) -> float:
        if not isinstance(answer, str):
            return 0.0
        return 1.0 if any(self._matches(answer, gold, task) for gold in task.gold["answers"]) else 0.0

    def _matches(self, reply: str, gold: str, task: Task) -> bool:
        if self.verifier == "exact":
            return normalize_answer(reply) == normalize_answer(gold)
        if self.verifier == "numeric":
            got, want = last_number(reply), last_number(gold)
            return got is not None and want is not None and math.isclose(got, want, rel_tol=self.tolerance,
                                                                          abs_tol=self.tolerance)  # fmt: skip
        if self.verifier == "choice":
            choices = task.inputs.get("choices") or []
            picked = choice_index(reply, choices)
            return picked is not None and picked == choice_index(gold, choices)
        return re.fullmatch(gold, reply.strip()[:MAX_REPLY_CHARS], re.IGNORECASE) is not None

    def knob_pool(self) -> dict[str, list[Any]]:
        return {
            "INSTRUCTION": [
                "Give only the final answer, on one line, as: Answer: <answer>",
                "Think briefly, then end with a line: Answer: <answer>",
                "Reply with the answer only.",
            ],
            "MAX_TOKENS": [32, 64, 128, 256],
        }


def _choice_list(text: str) -> list[str] | str:
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return [c.strip() for c in text.split("|")]
    return value if isinstance(value, list) else text
