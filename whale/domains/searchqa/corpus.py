"""The synthetic encyclopedia: invented people, places and organisations (names built from syllables, so no
answer can come from a model's memory), their articles, and the one- and two-hop facts asked about them."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from whale.domains.searchqa.text import STOPWORDS, contains

DEFAULT_N_DOCS = 2000


MIN_DOCS = 100


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
