"""The searchqa domain: questions answered from a retrieval corpus, scored by normalised exact match.

By default the corpus is a seeded synthetic encyclopedia of invented people, places and organisations
(names are built from syllables, so no answer can come from a model's memory), with one- and two-hop
questions about it. A user corpus with HotpotQA/NQ-style questions can be loaded from JSONL instead.
The BM25 index (bm25s) is built once per domain instance in the parent and shared by every rollout.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from pathlib import Path
from typing import Any

from whale.domains.base import SPLITS
from whale.domains.data_rows import read_rows
from whale.domains.searchqa.corpus import (
    DEFAULT_N_DOCS,
    MIN_DOCS,
    Document,
    Encyclopedia,
    Fact,
    build_encyclopedia,
    interleave_by_relation,
    make_facts,
)
from whale.domains.searchqa.index import SearchIndex, SearchToolbox
from whale.domains.searchqa.text import exact_match, normalize_answer
from whale.domains.user_files import Skips
from whale.harness.task import Task

DEFAULT_SIZES = {"train": 2000, "search": 32, "val": 32, "test": 64}

# ---------------------------------------------------------------------------------------------------------
# The synthetic encyclopedia


# ---------------------------------------------------------------------------------------------------------
# Scoring (SQuAD-style)


# ---------------------------------------------------------------------------------------------------------
# Retrieval


# ---------------------------------------------------------------------------------------------------------
# User data


def load_qa_jsonl(
    questions_path: str | Path, corpus_path: str | Path, strict: bool = False
) -> tuple[list[Task], list[Document]]:
    """HotpotQA/NQ-style questions ({"question", "answer": str} or {"question", "answers": [str, ...]}) and
    a corpus ({"id", "title", "text"}), as (tasks, documents). A malformed row of either file is skipped by
    path:line with a summary on stderr (`strict` refuses any), and a question none of whose answers occurs
    in the loaded corpus is kept with meta["answerable"] False and counted."""
    documents, corpus_skips = load_corpus(corpus_path)
    corpus_skips.refuse_if_strict(strict, len(documents))
    if not documents:
        raise ValueError(f"{corpus_path}: no usable documents ({corpus_skips.summary(0)})")
    if corpus_skips.lines:
        corpus_skips.report(f"{corpus_path}: corpus", len(documents))
    corpus_text = " " + " ".join(normalize_answer(f"{d.title} {d.text}") for d in documents) + " "
    tasks: list[Task] = []
    skips = Skips()
    unanswerable = 0
    for where, row in read_rows(questions_path)[1]:
        problem = row if isinstance(row, str) else _question_problem(row)
        if problem:
            skips.add(where, problem)
            continue
        answers = row["answers"] if "answers" in row else [row["answer"]]
        hops = row.get("hops")
        meta: dict[str, Any] = {"source": "jsonl", "hops": hops if isinstance(hops, int) else None}
        if isinstance(row.get("id", row.get("_id")), (str, int)):
            meta["source_id"] = str(row.get("id", row.get("_id")))
        meta["answerable"] = any(f" {normalize_answer(a)} " in corpus_text for a in answers)
        unanswerable += not meta["answerable"]
        tasks.append(
            Task(f"qa-{len(tasks)}", {"question": row["question"].strip()}, {"answers": answers}, meta)
        )
    skips.refuse_if_strict(strict, len(tasks))
    if not tasks:
        raise ValueError(f"{questions_path}: no usable questions ({skips.summary(0)})")
    note = f"; {unanswerable} with no gold answer in the corpus (meta answerable: false)" * bool(unanswerable)
    skips.report(f"{questions_path}: questions", len(tasks), note)
    return tasks, documents


def load_corpus(path: str | Path) -> tuple[list[Document], Skips]:
    """The corpus's documents and the rows skipped: malformed, or repeating an earlier row's id (the
    first is kept, so a `lookup` by title never depends on which duplicate won)."""
    documents: list[Document] = []
    seen_ids: set[str] = set()
    skips = Skips()
    for where, row in read_rows(path)[1]:
        problem = row if isinstance(row, str) else _document_problem(row)
        doc_id = "" if problem else str(row["id"])
        if not problem and doc_id in seen_ids:
            problem = f"duplicate id {doc_id!r}"
        if problem:
            skips.add(where, problem)
            continue
        seen_ids.add(doc_id)
        documents.append(Document(doc_id, row["title"], row["text"]))
    return documents, skips


def _document_problem(row: dict[str, Any]) -> str:
    doc_id, title, text = row.get("id"), row.get("title"), row.get("text")
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
        return "bad id (expected a string or integer 'id')"
    if not isinstance(title, str) or not isinstance(text, str) or not (title.strip() or text.strip()):
        return "bad document (expected string 'title' and 'text', not both empty)"
    return ""


def _question_problem(row: dict[str, Any]) -> str:
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        return "no question (expected a non-empty string 'question')"
    if "answers" in row:
        answers = row["answers"]
        if not isinstance(answers, list) or not answers:
            return "bad answers ('answers' must be a non-empty list of strings)"
    elif "answer" in row:
        answers = [row["answer"]]
    else:
        return "no answer (expected 'answer' (string) or 'answers' (list))"
    if not all(isinstance(a, str) and normalize_answer(a) for a in answers):
        return "bad answers (every answer must be a string with a word or number)"
    return ""


# ---------------------------------------------------------------------------------------------------------
# The domain

BRIEF = """\
Search question answering. Each task gives task["question"], a factual question about a document \
collection (an encyclopedia of invented people, places and organisations, so the model cannot know the \
answers). Some questions need one document; two-hop questions ("In which year was the founder of the X \
born?") need a second search for the entity found in the first document. The harness \
`run(task, llm, tools) -> str` must return the answer as a short span ("Korvath", "1843", "painter").
Model: a small chat model (about 135M parameters) behind llm.chat(messages, max_tokens=None, \
temperature=None, stop=None, n=1); keep prompts short and plain, it follows long instructions badly.
Tools: tools.search(query, k=3) returns up to k (at most 10) BM25 results as [{"title": str, "text": str}], \
best first, [] when nothing matches; tools.lookup(title) returns the text of the document with that exact \
title. Both raise on bad arguments (empty or over-long query, k < 1, unknown title).
Rules: do not hard-code answers or recognize specific questions, do not read data files; answer with a \
short span, not a sentence. Score: 1 when the answer equals a gold answer after lowercasing and removing \
punctuation and the articles a/an/the, else 0 (token F1 is reported separately)."""

KNOB_POOL: dict[str, list[Any]] = {
    "SYSTEM_PROMPT": [
        "You are a helpful assistant. Answer the question.",
        "You answer questions using the given passages.",
        "Answer questions with a few words taken from the passages.",
        "You are a careful reader. Use only the passages to answer.",
        "You find facts in short texts and reply with just the fact.",
    ],
    "INSTRUCTION": [
        "Answer briefly.",
        "Answer with a name, a number or a few words.",
        "Reply with the answer only, no sentence.",
        "Copy the answer from the passages. Use at most five words.",
        "Give only the short answer.",
    ],
    "REWRITE_INSTRUCTION": [
        "Write a short search query for this question. Reply with the query only.",
        "Which name should be searched to answer this? Reply with the name only.",
        "Write the key words to search for. Reply with the words only.",
        "Rewrite the question as a search query of a few words.",
    ],
    "HOP_INSTRUCTION": [
        "Which name in the passages should be searched next? Reply with the name only.",
        "Answer the first part of the question with a name from the passages. Reply with the name only.",
        "Who or which city is the question really about? Reply with the name only.",
        "Which person, place or organisation must be looked up next? Reply with the name.",
    ],
}


class SearchQADomain:
    """Questions over a retrieval corpus; splits are disjoint by question text (and, generated, by fact)."""

    name = "searchqa"
    brief = BRIEF

    def __init__(
        self,
        seed: int = 0,
        sizes: dict[str, int] | None = None,
        n_docs: int = DEFAULT_N_DOCS,
        questions_path: str | Path | None = None,
        corpus_path: str | Path | None = None,
        strict: bool = False,
    ):
        unknown = set(sizes or {}) - set(SPLITS)
        if unknown:
            raise ValueError(f"unknown searchqa splits {sorted(unknown)}; expected {list(SPLITS)}")
        if (questions_path is None) != (corpus_path is None):
            raise ValueError("searchqa needs both questions_path and corpus_path, or neither")
        if questions_path is None and (not isinstance(n_docs, int) or n_docs < MIN_DOCS):
            raise ValueError(f"searchqa n_docs must be at least {MIN_DOCS}, got {n_docs}")
        self.seed = seed
        self.sizes = {**DEFAULT_SIZES, **(sizes or {})}
        if any(not isinstance(n, int) or n < 0 for n in self.sizes.values()):
            raise ValueError(f"searchqa split sizes must be non-negative integers, got {self.sizes}")
        self.n_docs = n_docs
        self.questions_path, self.corpus_path = questions_path, corpus_path
        self._encyclopedia: Encyclopedia | None = None
        self._documents: list[Document] | None = None
        self._index: SearchIndex | None = None
        self._splits: dict[str, list[Task]] | None = None
        if questions_path is not None:  # user files are read and split now, so bad data fails at build time
            tasks, self._documents = load_qa_jsonl(questions_path, corpus_path, strict)
            self._splits = self._split_loaded(tasks)

    @property
    def documents(self) -> list[Document]:
        """The corpus; the synthetic one is built on first use (a few tens of milliseconds)."""
        if self._documents is None:
            self._encyclopedia = build_encyclopedia(self.seed, self.n_docs)
            self._documents = self._encyclopedia.documents
        return self._documents

    @property
    def index(self) -> SearchIndex:
        if self._index is None:
            self._index = SearchIndex(self.documents)
        return self._index

    def splits(self) -> dict[str, list[Task]]:
        """Evaluation splits are drawn first, so their content does not depend on the train size."""
        if self._splits is None:
            self.documents  # noqa: B018 - builds the synthetic corpus the questions are about
            self._splits = self._split_generated()
        return self._splits

    def _split_generated(self) -> dict[str, list[Task]]:
        rng = random.Random(f"searchqa:{self.seed}:questions")
        one, two = make_facts(self._encyclopedia, rng)
        pools = {1: deque(interleave_by_relation(one, rng)), 2: deque(interleave_by_relation(two, rng))}
        seen: set[str] = set()
        out: dict[str, list[Task]] = {}
        for split in ("test", "val", "search", "train"):
            n = self.sizes[split]
            want = {2: n // 2, 1: n - n // 2}
            taken: dict[int, list[Fact]] = {1: [], 2: []}
            for hops in (1, 2):
                while len(taken[hops]) < want[hops] and pools[hops]:
                    fact = pools[hops].popleft()
                    if fact.question not in seen:
                        seen.add(fact.question)
                        taken[hops].append(fact)
                if len(taken[hops]) < want[hops]:
                    raise ValueError(
                        f"searchqa: not enough {hops}-hop questions for split {split!r} "
                        f"({want[hops]} wanted); raise n_docs (now {self.n_docs}) or lower the sizes"
                    )
            chosen = [f for pair in itertools.zip_longest(taken[1], taken[2]) for f in pair if f is not None]
            out[split] = [
                Task(
                    id=f"searchqa-{split}-{i}",
                    inputs={"question": f.question},
                    gold={"answers": list(f.answers), "support": list(f.support), "bridge": f.bridge},
                    meta={"hops": f.hops, "relation": f.relation, "source": "synthetic"},
                )
                for i, f in enumerate(chosen)
            ]
        return {split: out[split] for split in SPLITS}

    def _split_loaded(self, tasks: list[Task]) -> dict[str, list[Task]]:
        """Shuffled by seed and deduplicated by question; evaluation splits must be full, train takes the
        rest up to its size."""
        rng = random.Random(f"searchqa:{self.seed}:split")
        unique: dict[str, Task] = {}
        for t in tasks:
            unique.setdefault(t.inputs["question"], t)
        pool = list(unique.values())
        rng.shuffle(pool)
        out: dict[str, list[Task]] = {}
        for split in ("test", "val", "search", "train"):
            n = self.sizes[split]
            if split != "train" and len(pool) < n:
                raise ValueError(
                    f"{self.questions_path}: {len(unique)} distinct questions are too few for the "
                    f"evaluation splits (test {self.sizes['test']}, val {self.sizes['val']}, "
                    f"search {self.sizes['search']})"
                )
            taken, pool = pool[:n], pool[n:]
            out[split] = [
                Task(f"searchqa-{split}-{i}", t.inputs, t.gold, t.meta) for i, t in enumerate(taken)
            ]
        return {split: out[split] for split in SPLITS}

    def seed_harness(self) -> str:
        return (Path(__file__).parents[1] / "harnesses" / "searchqa_seed.py").read_text(encoding="utf-8")

    def toolbox(self, task: Task) -> SearchToolbox:
        return SearchToolbox(self.index)

    def verify(self, task: Task, answer: str | None, toolbox: Any) -> float:
        """1.0 when the normalised answer equals any normalised gold answer, else 0.0."""
        return exact_match(answer, task.gold["answers"])

    def knob_pool(self) -> dict[str, list[Any]]:
        return {knob: list(values) for knob, values in KNOB_POOL.items()}
