"""The searchqa domain: questions answered from a retrieval corpus, scored by normalised exact match.

By default the corpus is a seeded synthetic encyclopedia of invented people, places and organisations
(names are built from syllables, so no answer can come from a model's memory), with one- and two-hop
questions about it. A user corpus with HotpotQA/NQ-style questions can be loaded from JSONL instead.
The BM25 index (bm25s) is built once per domain instance in the parent and shared by every rollout.
"""

from __future__ import annotations

import itertools
import random
import re
import string
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.domains.base import SPLITS, read_jsonl_rows
from whale.harness.task import Task, ToolError

DEFAULT_SIZES = {"train": 2000, "search": 32, "val": 32, "test": 64}
DEFAULT_N_DOCS = 2000
MIN_DOCS = 100
MAX_K = 10
MAX_QUERY_CHARS = 500
MAX_TITLE_CHARS = 300
MAX_RESULT_CHARS = 2000

# ---------------------------------------------------------------------------------------------------------
# The synthetic encyclopedia

SYLLABLES = (
    "ka", "vel", "mor", "dri", "sen", "tal", "bro", "quin", "zar", "lo", "nith", "rem", "vas", "tor", "el",
    "mun", "gra", "pel", "sho", "fen", "dal", "rik", "oth", "ya", "bel", "cor", "ist", "nav", "ul", "ser",
    "han", "pim", "tes", "gor", "lun", "vey", "ash", "kri", "dov", "ran", "zu", "fal", "ith", "wen", "bas",
    "tre", "om", "sil", "jor", "mek",
)  # fmt: skip
CITY_SUFFIXES = ("", "", "", "ford", "heim", "ova", "mir", "holt")
REGION_SUFFIXES = ("ia", "and", "ora", "esh")
OCCUPATIONS = (
    "painter", "sculptor", "chemist", "botanist", "architect", "poet", "composer", "cartographer",
    "astronomer", "engineer", "physician", "novelist", "historian", "mathematician", "violinist", "linguist",
    "geologist", "photographer", "merchant", "diplomat", "economist", "playwright", "inventor", "philosopher",
    "surgeon",
)  # fmt: skip
ORG_KINDS = {
    "Institute": "research institute",
    "Company": "trading company",
    "Society": "learned society",
    "Bank": "bank",
    "Orchestra": "orchestra",
    "Museum": "museum",
    "Press": "publishing house",
    "Guild": "craft guild",
    "Academy": "school",
    "Foundation": "charity",
}
PRODUCTS = ("wool", "salt", "timber", "copper", "wine", "cheese", "glass", "silk", "barley", "horses")
# Words of the templates below: a generated name must not collide with one of them.
TEMPLATE_WORDS = frozenset(
    "born city year later moved spent many years worked time region capital known river flows through lies "
    "population about people live headquarters based has its founded became town from members".split()
    + [w.lower() for w in (*OCCUPATIONS, *ORG_KINDS, *PRODUCTS)]
)


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


@dataclass
class Person:
    name: str
    family: str
    birthplace: str
    birth_year: int
    occupation: str
    moved_to: str
    workplace: str | None = None


@dataclass
class City:
    name: str
    region: str
    river: str
    population: int


@dataclass
class Region:
    name: str
    capital: str
    product: str


@dataclass
class Org:
    name: str
    kind: str
    founder: str
    founding_year: int
    headquarters: str


@dataclass
class Fact:
    """One generated question: its text, gold answers, and the documents that support it (in hop order).
    Each (subject, relation) yields at most one question, so splits disjoint by text are disjoint by fact."""

    question: str
    answers: list[str]
    hops: int
    relation: str
    support: list[str]  # titles: the first-hop document, then (two-hop) the answer document
    bridge: str | None = None


@dataclass
class Encyclopedia:
    documents: list[Document]
    people: dict[str, Person] = field(default_factory=dict)
    cities: dict[str, City] = field(default_factory=dict)
    regions: dict[str, Region] = field(default_factory=dict)
    orgs: dict[str, Org] = field(default_factory=dict)


class NameMaker:
    """Invented capitalised words from syllables; never a template word or a stopword, never reused."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: tuple[int, int], suffixes: tuple[str, ...] = ("",)) -> str:
        low, high = syllables
        for attempt in range(2000):
            if attempt and attempt % 200 == 0:  # this length is crowded: allow one more syllable
                high += 1
            parts = [self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(low, high))]
            if any(a == b for a, b in itertools.pairwise(parts)):
                continue
            word = "".join(parts) + self.rng.choice(suffixes)
            if len(word) < 4 or word in TEMPLATE_WORDS or word in STOPWORDS:
                continue
            if word in self.used:
                continue
            self.used.add(word)
            return word.capitalize()
        raise ValueError("ran out of invented names; lower n_docs")


def plan_counts(n_docs: int) -> dict[str, int]:
    regions = max(4, n_docs // 60)
    cities = max(12, n_docs * 15 // 100)
    orgs = max(10, n_docs // 4)
    return {"regions": regions, "cities": cities, "orgs": orgs, "people": n_docs - regions - cities - orgs}


def build_encyclopedia(seed: int | str, n_docs: int = DEFAULT_N_DOCS) -> Encyclopedia:
    """`n_docs` short documents about invented entities, reproducible from `seed`.

    Similar names are built in on purpose: people share given and family names, some cities are another
    city's name plus a suffix, and several organisations share a stem ("Velmar Institute", "Velmar Press").
    A person's document never names an organisation that person founded, so "the founder of X" questions
    need the organisation's document and then the founder's.
    """
    if n_docs < MIN_DOCS:
        raise ValueError(f"searchqa n_docs must be at least {MIN_DOCS}, got {n_docs}")
    rng = random.Random(f"searchqa:{seed}:corpus")
    names = NameMaker(rng)
    counts = plan_counts(n_docs)
    enc = Encyclopedia([])

    region_names = [names.word((2, 2), REGION_SUFFIXES) for _ in range(counts["regions"])]
    rivers = [names.word((1, 2)) for _ in range(max(6, counts["cities"] // 3))]
    city_names: list[str] = []
    originals: list[str] = []
    while len(city_names) < counts["cities"]:
        if originals and rng.random() < 0.2:  # a near-twin of an existing city
            base = rng.choice(originals).lower()
            twin = base + rng.choice(("en", "a", "is", "ton"))
            if twin not in names.used and twin.capitalize() not in city_names:
                names.used.add(twin)
                city_names.append(twin.capitalize())
            continue
        originals.append(names.word((2, 2), CITY_SUFFIXES))
        city_names.append(originals[-1])
    for i, city in enumerate(city_names):
        region = region_names[i % len(region_names)] if i < len(region_names) else rng.choice(region_names)
        population = rng.randint(2, 900) * 1000
        enc.cities[city] = City(city, region, rng.choice(rivers), population)
    for i, region in enumerate(region_names):
        enc.regions[region] = Region(region, city_names[i], rng.choice(PRODUCTS))  # city i lies in region i

    given_pool = [names.word((2, 2)) for _ in range(max(20, counts["people"] // 4))]
    family_pool = [names.word((2, 3)) for _ in range(max(30, counts["people"] // 2))]
    while len(enc.people) < counts["people"]:
        full = f"{rng.choice(given_pool)} {rng.choice(family_pool)}"
        if full in enc.people:
            continue
        birthplace, moved_to = rng.sample(city_names, 2)  # a second city: a distractor for "born where"
        occupation = rng.choice(OCCUPATIONS)
        enc.people[full] = Person(
            full, full.split()[1], birthplace, rng.randint(1650, 1950), occupation, moved_to
        )

    people = list(enc.people)
    founders = rng.sample(people, min(len(people), counts["orgs"]))
    stems: list[str] = []
    kinds = sorted(ORG_KINDS)
    while len(enc.orgs) < counts["orgs"]:
        if stems and rng.random() < 0.3:  # shares a stem with an existing organisation
            stem = rng.choice(stems)
        else:
            stem = names.word((2, 3))
            stems.append(stem)
        org = f"{stem} {rng.choice(kinds)}"
        if org in enc.orgs:
            continue
        founder = founders[len(enc.orgs) % len(founders)]
        year = min(2020, enc.people[founder].birth_year + rng.randint(25, 65))
        enc.orgs[org] = Org(org, org.split()[1], founder, year, rng.choice(city_names))
    founded: dict[str, set[str]] = {}
    for org in enc.orgs.values():
        founded.setdefault(org.founder, set()).add(org.name)
    org_names = list(enc.orgs)
    for person in enc.people.values():
        if rng.random() < 0.4:
            choice = rng.choice(org_names)
            if choice not in founded.get(person.name, ()):
                person.workplace = choice

    for person in enc.people.values():
        enc.documents.append(person_doc(rng, person))
    for org in enc.orgs.values():
        enc.documents.append(org_doc(rng, org))
    for city in enc.cities.values():
        enc.documents.append(city_doc(rng, city))
    for region in enc.regions.values():
        enc.documents.append(region_doc(rng, region))
    rng.shuffle(enc.documents)
    enc.documents = [Document(f"doc-{i}", d.title, d.text) for i, d in enumerate(enc.documents)]
    return enc


def article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def person_doc(rng: random.Random, p: Person) -> Document:
    first = rng.choice(
        (
            "{name} was {a} {occ} born in {city} in {year}.",
            "{name} was born in {year} in the city of {city} and became {a} {occ}.",
            "Born in {city} in {year}, {name} worked as {a} {occ}.",
        )
    ).format(name=p.name, occ=p.occupation, a=article(p.occupation), city=p.birthplace, year=p.birth_year)
    second = rng.choice(("{f} later moved to {c}.", "{f} spent many years in {c}."))
    sentences = [first, second.format(f=p.family, c=p.moved_to)]
    if p.workplace:
        sentences.append(f"For a time {p.family} worked at the {p.workplace}.")
    return Document("", p.name, " ".join(sentences))


def org_doc(rng: random.Random, o: Org) -> Document:
    first = rng.choice(
        (
            "The {org} is {a} {kind} founded in {year} by {founder}.",
            "{founder} founded the {org}, {a} {kind}, in {year}.",
        )
    ).format(
        org=o.name,
        kind=ORG_KINDS[o.kind],
        a=article(ORG_KINDS[o.kind]),
        year=o.founding_year,
        founder=o.founder,
    )
    second = rng.choice(
        (
            "Its headquarters are in {city}.",
            "The {org} has its headquarters in {city}.",
            "It is based in {city}.",
        )
    ).format(org=o.name, city=o.headquarters)
    sentences = [first, second]
    if rng.random() < 0.5:
        sentences.append(f"It has about {rng.randint(2, 90) * 10} members.")
    return Document("", o.name, " ".join(sentences))


def city_doc(rng: random.Random, c: City) -> Document:
    sentences = [
        rng.choice(("{c} is a city in {r}.", "{c} is a town in the region of {r}.")).format(
            c=c.name, r=c.region
        ),
        rng.choice(("It lies on the {v} River.", "The {v} River flows through {c}.")).format(
            v=c.river, c=c.name
        ),
        rng.choice(("{c} has a population of about {p}.", "About {p} people live in {c}.")).format(
            c=c.name, p=f"{c.population:,}"
        ),
    ]
    return Document("", c.name, " ".join(sentences))


def region_doc(rng: random.Random, r: Region) -> Document:
    sentences = [
        rng.choice(
            ("{r} is a region whose capital is {c}.", "The capital of the region of {r} is {c}.")
        ).format(r=r.name, c=r.capital),
        f"{r.name} is known for its {r.product}.",
    ]
    return Document("", r.name, " ".join(sentences))


# Question templates: {s} is a name (one hop) or a description of the bridge entity (two hops).
ONE_HOP_TEMPLATES = {
    "birthplace": ("In which city was {s} born?", "Where was {s} born?"),
    "birth_year": ("In which year was {s} born?", "When was {s} born?"),
    "occupation": ("What was the occupation of {s}?", "What did {s} work as?"),
    "founder": ("Who founded the {s}?", "Who was the founder of the {s}?"),
    "founding_year": ("In which year was the {s} founded?", "When was the {s} founded?"),
    "headquarters": ("In which city is the {s} headquartered?", "Where are the headquarters of the {s}?"),
    "region": ("In which region is {s}?", "Which region is {s} in?"),
    "river": ("Which river flows through {s}?", "On which river does {s} lie?"),
    "population": ("What is the population of {s}?", "How many people live in {s}?"),
    "capital": ("What is the capital of {s}?", "Which city is the capital of {s}?"),
}
TWO_HOP_TEMPLATES = {
    "birthplace": ("In which city was {s} born?",),
    "birth_year": ("In which year was {s} born?", "When was {s} born?"),
    "occupation": ("What was the occupation of {s}?",),
    "region": ("In which region is {s}?",),
    "river": ("Which river flows through {s}?",),
    "population": ("What is the population of {s}?", "How many people live in {s}?"),
}


def person_answers(p: Person, relation: str) -> list[str]:
    return {
        "birthplace": [p.birthplace],
        "birth_year": [str(p.birth_year)],
        "occupation": [p.occupation],
    }[relation]


def city_answers(c: City, relation: str) -> list[str]:
    return {
        "region": [c.region],
        "river": [c.river, f"{c.river} River"],
        "population": [f"{c.population:,}"],
    }[relation]


def make_facts(enc: Encyclopedia, rng: random.Random) -> tuple[list[Fact], list[Fact]]:
    """Every askable question about `enc`: (one-hop, two-hop). A two-hop question is dropped when its
    answer already appears in the first-hop document (it would not need the second document)."""
    text = {d.title: d.text for d in enc.documents}
    one: list[Fact] = []
    two: list[Fact] = []

    def add_one(subject: str, relation: str, answers: list[str]) -> None:
        q = rng.choice(ONE_HOP_TEMPLATES[relation]).format(s=subject)
        one.append(Fact(q, answers, 1, relation, [subject]))

    def add_two(subject: str, relation: str, description: str, bridge: str, answers: list[str]) -> None:
        if any(contains(text[subject], a) for a in answers):
            return
        q = rng.choice(TWO_HOP_TEMPLATES[relation]).format(s=description)
        two.append(Fact(q, answers, 2, relation, [subject, bridge], bridge))

    for p in enc.people.values():
        for relation in ("birthplace", "birth_year", "occupation"):
            add_one(p.name, relation, person_answers(p, relation))
        city = enc.cities[p.birthplace]
        for relation in ("region", "river", "population"):
            add_two(
                p.name, relation, f"the city where {p.name} was born", city.name, city_answers(city, relation)
            )
    for o in enc.orgs.values():
        add_one(o.name, "founder", [o.founder])
        add_one(o.name, "founding_year", [str(o.founding_year)])
        add_one(o.name, "headquarters", [o.headquarters])
        founder = enc.people[o.founder]
        for relation in ("birthplace", "birth_year", "occupation"):
            add_two(
                o.name,
                relation,
                f"the founder of the {o.name}",
                founder.name,
                person_answers(founder, relation),
            )
        city = enc.cities[o.headquarters]
        for relation in ("region", "river"):
            description = f"the city where the {o.name} is headquartered"
            add_two(o.name, relation, description, city.name, city_answers(city, relation))
    for c in enc.cities.values():
        for relation in ("region", "river", "population"):
            add_one(c.name, relation, city_answers(c, relation))
    for r in enc.regions.values():
        add_one(r.name, "capital", [r.capital])
    return one, two


def interleave_by_relation(facts: list[Fact], rng: random.Random) -> list[Fact]:
    """Shuffle within each relation, then deal round-robin, so any prefix mixes the relations evenly."""
    groups: dict[str, list[Fact]] = {}
    for f in facts:
        groups.setdefault(f.relation, []).append(f)
    queues = [groups[r] for r in sorted(groups)]
    for q in queues:
        rng.shuffle(q)
    rng.shuffle(queues)
    out: list[Fact] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop())
    return out


# ---------------------------------------------------------------------------------------------------------
# Scoring (SQuAD-style)

ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace (SQuAD's normalisation)."""
    text = str(text).lower().translate(PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(prediction: str | None, golds: list[str]) -> float:
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return 1.0 if any(pred == normalize_answer(g) for g in golds) else 0.0


def token_f1(prediction: str | None, golds: list[str] | str) -> float:
    """The best SQuAD token F1 of `prediction` against any gold answer (0.0 for no prediction)."""
    if prediction is None:
        return 0.0
    if isinstance(golds, str):
        golds = [golds]
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        if not pred or not ref:
            best = max(best, float(pred == ref))
            continue
        common = sum((Counter(pred) & Counter(ref)).values())
        if common:
            precision, recall = common / len(pred), common / len(ref)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def contains(text: str, answer: str) -> bool:
    """Whether the normalised `answer` occurs in the normalised `text` as whole words."""
    needle = normalize_answer(answer)
    return bool(needle) and f" {needle} " in f" {normalize_answer(text)} "


# ---------------------------------------------------------------------------------------------------------
# Retrieval

# bm25s's English stopwords plus question words, so a question used as a query matches on its content.
STOPWORDS = frozenset(
    (
        "a an and are as at be but by for if in into is it no not of on or such that the their then there "
        "these they this to was will with what which who whom whose where when how did does do were"
    ).split()
)
TOKEN = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Lowercase, split on anything not a letter or digit, drop stopwords."""
    return [t for t in TOKEN.findall(text.lower()) if t not in STOPWORDS]


class SearchIndex:
    """BM25 over `title + text` of each document; ties broken by corpus order, so results are stable."""

    def __init__(self, documents: list[Document]):
        import bm25s  # deferred: importing whale.domains.searchqa.domain should stay cheap

        if not documents:
            raise ValueError("searchqa corpus is empty")
        self.documents = documents
        self.by_title: dict[str, Document] = {}
        self.by_folded_title: dict[str, Document] = {}
        for d in documents:
            self.by_title.setdefault(d.title, d)
            self.by_folded_title.setdefault(" ".join(d.title.lower().split()), d)
        self.bm25 = bm25s.BM25()
        self.bm25.index([tokenize(f"{d.title} {d.text}") for d in documents], show_progress=False)

    def search(self, query: str, k: int) -> list[Document]:
        ids = self.bm25.get_tokens_ids(tokenize(query))
        if not ids:
            return []
        import numpy as np

        scores = self.bm25.get_scores_from_ids(ids)
        order = np.argsort(-scores, kind="stable")[:k]
        return [self.documents[i] for i in order if scores[i] > 0]

    def lookup(self, title: str) -> Document | None:
        return self.by_title.get(title) or self.by_folded_title.get(" ".join(title.lower().split()))


def bind(signature: str, params: tuple[tuple[str, Any], ...], args: list, kwargs: dict) -> dict[str, Any]:
    """Match positional and keyword arguments to `params` ((name, default) pairs; REQUIRED has none)."""
    names = [name for name, _ in params]
    if len(args) > len(params):
        raise ToolError(f"too many arguments; call it as {signature}")
    values = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names:
            raise ToolError(f"unexpected argument {str(key)[:40]!r}; call it as {signature}")
        if key in values:
            raise ToolError(f"argument {key!r} given twice; call it as {signature}")
        values[key] = value
    for name, default in params:
        if name not in values:
            if default is REQUIRED:
                raise ToolError(f"missing argument {name!r}; call it as {signature}")
            values[name] = default
    return values


REQUIRED = object()
SEARCH_SIGNATURE = "search(query: str, k: int = 3)"
LOOKUP_SIGNATURE = "lookup(title: str)"


class SearchToolbox:
    """search(query, k=3) -> [{"title", "text"}, ...]; lookup(title) -> text; stateless, shares the index."""

    names = ("search", "lookup")

    def __init__(self, index: SearchIndex):
        self.index = index

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name == "search":
            values = bind(SEARCH_SIGNATURE, (("query", REQUIRED), ("k", 3)), args, kwargs)
            return self.search(values["query"], values["k"])
        if name == "lookup":
            values = bind(LOOKUP_SIGNATURE, (("title", REQUIRED),), args, kwargs)
            return self.lookup(values["title"])
        raise ToolError(f"unknown tool {str(name)[:40]!r}; available: search, lookup")

    def search(self, query: Any, k: Any = 3) -> list[dict[str, str]]:
        if not isinstance(query, str):
            raise ToolError(f"search: query must be a string, got {type(query).__name__}")
        if not query.strip():
            raise ToolError("search: empty query")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolError(f"search: query longer than {MAX_QUERY_CHARS} characters")
        if not isinstance(k, int) or isinstance(k, bool):
            raise ToolError(f"search: k must be an integer, got {type(k).__name__}")
        if k < 1:
            raise ToolError(f"search: k must be at least 1, got {k}")
        hits = self.index.search(query, min(k, MAX_K))
        return [{"title": d.title, "text": d.text[:MAX_RESULT_CHARS]} for d in hits]

    def lookup(self, title: Any) -> str:
        if not isinstance(title, str):
            raise ToolError(f"lookup: title must be a string, got {type(title).__name__}")
        if not title.strip() or len(title) > MAX_TITLE_CHARS:
            raise ToolError(f"lookup: title must be 1..{MAX_TITLE_CHARS} characters")
        doc = self.index.lookup(title)
        if doc is None:
            raise ToolError(f"lookup: no document titled {title[:80]!r}; use search to find titles")
        return doc.text[:MAX_RESULT_CHARS]


# ---------------------------------------------------------------------------------------------------------
# User data


def load_qa_jsonl(questions_path: str | Path, corpus_path: str | Path) -> tuple[list[Task], list[Document]]:
    """HotpotQA/NQ-style questions ({"question", "answer": str} or {"question", "answers": [str, ...]}) and
    a corpus ({"id", "title", "text"}), as (tasks, documents). A malformed row fails with its path:line."""
    documents: list[Document] = []
    seen_ids: set[str] = set()
    for lineno, row in read_jsonl_rows(corpus_path):
        doc_id, title, text = row.get("id"), row.get("title"), row.get("text")
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"{corpus_path}:{lineno}: expected a string or integer 'id'")
        if not isinstance(title, str) or not isinstance(text, str) or not (title.strip() or text.strip()):
            raise ValueError(f"{corpus_path}:{lineno}: expected string 'title' and 'text', not both empty")
        if doc_id in seen_ids:
            raise ValueError(f"{corpus_path}:{lineno}: duplicate id {doc_id!r}")
        seen_ids.add(doc_id)
        documents.append(Document(doc_id, title, text))
    tasks: list[Task] = []
    for lineno, row in read_jsonl_rows(questions_path):
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{questions_path}:{lineno}: expected a non-empty string 'question'")
        if "answers" in row:
            answers = row["answers"]
            if not isinstance(answers, list) or not answers:
                raise ValueError(f"{questions_path}:{lineno}: 'answers' must be a non-empty list of strings")
        elif "answer" in row:
            answers = [row["answer"]]
        else:
            raise ValueError(f"{questions_path}:{lineno}: expected 'answer' (string) or 'answers' (list)")
        if not all(isinstance(a, str) and normalize_answer(a) for a in answers):
            raise ValueError(
                f"{questions_path}:{lineno}: every answer must be a string with a word or number"
            )
        hops = row.get("hops")
        meta: dict[str, Any] = {"source": "jsonl", "hops": hops if isinstance(hops, int) else None}
        if isinstance(row.get("id", row.get("_id")), (str, int)):
            meta["source_id"] = str(row.get("id", row.get("_id")))
        tasks.append(Task(f"qa-{len(tasks)}", {"question": question.strip()}, {"answers": answers}, meta))
    return tasks, documents


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
            tasks, self._documents = load_qa_jsonl(questions_path, corpus_path)
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
