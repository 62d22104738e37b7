"""A multiple-choice task written from docs/domains.md alone, as a new user would: which of four words
belongs to a named category. whale knows nothing of it; the options arrive in the task's inputs.

    whale run --domain-file examples/domains/category_choice.py --preset results-math \
        --set schedule.method=harness-only
"""

import random
import re

from whale.domains.base import Task, ToolError

CATEGORIES = {
    "fruit": ["apple", "banana", "cherry", "grape", "lemon", "mango", "orange", "peach", "pear", "plum"],
    "animal": ["horse", "tiger", "rabbit", "mouse", "sheep", "whale", "zebra", "camel", "eagle", "snake"],
    "colour": ["red", "blue", "green", "yellow", "purple", "brown", "black", "white", "pink", "grey"],
    "country": ["france", "japan", "brazil", "canada", "egypt", "india", "mexico", "norway", "peru", "spain"],
    "tool": ["hammer", "saw", "drill", "wrench", "shovel", "chisel", "pliers", "axe", "rake", "file"],
    "body part": ["arm", "leg", "knee", "elbow", "finger", "ankle", "shoulder", "nose", "ear", "wrist"],
    "vehicle": ["car", "bus", "truck", "bicycle", "train", "boat", "plane", "tractor", "scooter", "van"],
    "instrument": ["piano", "guitar", "violin", "drum", "flute", "trumpet", "harp", "cello", "banjo", "oboe"],
}

SEED_HARNESS = """
INSTRUCTION = "Answer with one word."


def run(task, llm, tools):
    options = ", ".join(task["options"])
    question = f"Which of these is a {task['category']}: {options}? {INSTRUCTION}"
    return llm.chat([{"role": "user", "content": question}], max_tokens=16).strip()
"""


def normalise(text):
    return re.sub(r"[^a-z ]", "", (text or "").lower()).strip()


class NoTools:
    names = ()

    def call(self, name, args, kwargs):
        raise ToolError(f"this task has no tools (asked for {name!r})")


class CategoryChoice:
    name = "category-choice"
    brief = (
        "Multiple choice: task['category'] names a category and task['options'] lists four words, exactly "
        "one of which belongs to it. run() must return that word, spelled as in the options. There are no "
        "tools. Do not hard-code answers."
    )

    def __init__(self, seed, sizes):
        rng = random.Random(seed)
        rows, seen = [], set()
        while len(rows) < sum(sizes.values()) and len(seen) < 20_000:
            category = rng.choice(sorted(CATEGORIES))
            answer = rng.choice(CATEGORIES[category])
            others = [rng.choice(CATEGORIES[c]) for c in rng.sample(sorted(set(CATEGORIES) - {category}), 3)]
            options = [answer, *others]
            rng.shuffle(options)
            key = (category, tuple(options))
            if key not in seen:
                seen.add(key)
                rows.append((category, options, answer))
        if len(rows) < sum(sizes.values()):
            raise ValueError(
                f"category-choice: only {len(rows)} distinct tasks, asked for {sum(sizes.values())}"
            )
        self._splits, start = {}, 0
        for split in ("train", "search", "val", "test"):
            chunk = rows[start : start + sizes[split]]
            start += sizes[split]
            self._splits[split] = [
                Task(f"cat-{split}-{i}", {"category": c, "options": o}, {"answer": a})
                for i, (c, o, a) in enumerate(chunk)
            ]

    def splits(self):
        return self._splits

    def seed_harness(self):
        return SEED_HARNESS

    def toolbox(self, task):
        return NoTools()

    def verify(self, task, answer, toolbox):
        return float(normalise(answer) == task.gold["answer"])

    def knob_pool(self):
        return {
            "INSTRUCTION": [
                "Answer with one word.",
                "Reply with the one word from the list that fits, and nothing else.",
            ]
        }


def make_domain(seed, sizes, **options):
    return CategoryChoice(seed, sizes)
