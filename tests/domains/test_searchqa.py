import json
import re
import time

import pytest

from whale.domains.base import SPLITS
from whale.domains.searchqa.corpus import build_encyclopedia
from whale.domains.searchqa.domain import SearchQADomain, load_qa_jsonl
from whale.domains.searchqa.index import SearchIndex
from whale.domains.searchqa.text import contains, normalize_answer, token_f1
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate
from whale.harness.runner import RolloutRunner
from whale.harness.task import Task, ToolError
from whale.harness.validate import problems
from whale.model.engine import Generation, GenerationRequest, SamplingParams
from whale.search.mutation import find_knobs, set_knobs

SMALL = {"train": 100, "search": 8, "val": 8, "test": 16}


@pytest.fixture(scope="module")
def domain() -> SearchQADomain:
    """The default corpus (2000 documents) with small splits."""
    return SearchQADomain(seed=0, sizes=SMALL)


@pytest.fixture(scope="module")
def docs(domain) -> dict[str, str]:
    return {d.title: d.text for d in domain.documents}


def all_tasks(splits: dict[str, list[Task]]) -> list[Task]:
    return [t for tasks in splits.values() for t in tasks]


def questions(tasks: list[Task]) -> list[str]:
    return [t.inputs["question"] for t in tasks]


# The corpus


def test_corpus_is_seeded_sized_and_fast():
    import bm25s  # noqa: F401 - imported before timing: the import is a one-off cost, not the build

    start = time.perf_counter()
    enc = build_encyclopedia(0)
    SearchIndex(enc.documents)
    assert time.perf_counter() - start < 2.0
    assert len(enc.documents) == 2000
    assert len({d.id for d in enc.documents}) == len({d.title for d in enc.documents}) == 2000
    assert build_encyclopedia(0, 300).documents == build_encyclopedia(0, 300).documents
    assert build_encyclopedia(1, 300).documents != build_encyclopedia(0, 300).documents
    for d in enc.documents:
        sentences = re.findall(r"[.!?](?:\s|$)", d.text)
        assert 2 <= len(sentences) <= 4, d.text


def test_corpus_has_similar_name_distractors():
    enc = build_encyclopedia(0)
    families = [p.family for p in enc.people.values()]
    assert len(set(families)) < len(families)  # people share family names
    stems = [o.name.split()[0] for o in enc.orgs.values()]
    assert len(set(stems)) < len(stems)  # "Velmar Institute" and "Velmar Press"
    cities = sorted(enc.cities)
    assert any(b.startswith(a) and a != b for a in cities for b in cities)  # near-twin city names


# Splits


def test_splits_are_disjoint_deterministic_and_seeded():
    splits = SearchQADomain(seed=0, sizes=SMALL, n_docs=400).splits()
    assert set(splits) == set(SPLITS)
    for split, tasks in splits.items():
        assert len(tasks) == SMALL[split]
        assert [t.id for t in tasks] == [f"searchqa-{split}-{i}" for i in range(SMALL[split])]
        hops = [t.meta["hops"] for t in tasks]
        assert hops.count(2) == len(tasks) // 2 and hops.count(1) == len(tasks) - len(tasks) // 2
        assert all(set(t.inputs) == {"question"} for t in tasks)
    qs = questions(all_tasks(splits))
    assert len(set(qs)) == len(qs)
    assert SearchQADomain(seed=0, sizes=SMALL, n_docs=400).splits() == splits
    other = SearchQADomain(seed=1, sizes=SMALL, n_docs=400).splits()
    assert questions(other["test"]) != questions(splits["test"])


def test_eval_splits_do_not_depend_on_train_size():
    small = SearchQADomain(seed=3, sizes={"train": 4}, n_docs=400).splits()
    large = SearchQADomain(seed=3, sizes={"train": 300}, n_docs=400).splits()
    assert all(small[s] == large[s] for s in ("test", "val", "search"))


def test_bad_config_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown"):
        SearchQADomain(sizes={"dev": 3})
    with pytest.raises(ValueError, match="n_docs"):
        SearchQADomain(n_docs=10)
    with pytest.raises(ValueError, match="both"):
        SearchQADomain(questions_path=tmp_path / "q.jsonl")
    with pytest.raises(ValueError, match="not enough"):
        SearchQADomain(sizes={"train": 5000}, n_docs=200).splits()


def test_gold_answers_are_in_the_corpus(domain, docs):
    for task in all_tasks(domain.splits()):
        answer_doc = docs[task.gold["support"][-1]]
        assert any(contains(answer_doc, a) for a in task.gold["answers"]), task


def test_one_hop_answer_documents_are_retrievable(domain):
    one_hop = [t for t in domain.splits()["train"] if t.meta["hops"] == 1][:100]
    assert len(one_hop) >= 50
    box = domain.toolbox(one_hop[0])
    found = [
        t.gold["support"][0] in [r["title"] for r in box.call("search", [t.inputs["question"]], {})]
        for t in one_hop
    ]
    assert sum(found) / len(found) >= 0.8


def test_two_hop_questions_need_two_documents(domain, docs):
    two_hop = [t for t in all_tasks(domain.splits()) if t.meta["hops"] == 2]
    assert len(two_hop) >= 50
    relations = set()
    for task in two_hop:
        first, second = task.gold["support"]
        assert first != second and task.gold["bridge"] == second
        assert first in task.inputs["question"] and second not in task.inputs["question"]
        assert second in docs[first]  # the first document names the bridge entity
        assert first not in docs[second]  # the answer document does not name the question's subject
        assert not any(contains(docs[first], a) for a in task.gold["answers"])
        relations.add(task.meta["relation"])
    assert len(relations) >= 4


# Scoring


@pytest.mark.parametrize(
    "answer, golds, score",
    [
        ("The Paris.", ["paris"], 1.0),
        ("paris", ["The Paris."], 1.0),
        ("  an   Old  Mill ", ["old mill"], 1.0),
        ("a painter", ["painter"], 1.0),
        ("48,000", ["48000"], 1.0),
        ("Velm River", ["Velm", "Velm River"], 1.0),
        ("Korvath!", ["Korvath"], 1.0),
        ("He was born in Korvath.", ["Korvath"], 0.0),
        ("Korvathen", ["Korvath"], 0.0),
        ("theatre", ["atre"], 0.0),
        ("", ["Korvath"], 0.0),
        (None, ["Korvath"], 0.0),
    ],
)
def test_verify_is_normalised_exact_match(answer, golds, score):
    domain = SearchQADomain(sizes={s: 1 for s in SPLITS})
    task = Task("t", {"question": "q"}, {"answers": golds})
    assert domain.verify(task, answer, None) == score


def test_normalize_answer():
    assert normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"


@pytest.mark.parametrize(
    "prediction, golds, f1",
    [
        ("Korvath", ["Korvath"], 1.0),
        ("the Velm River", ["Velm"], 2 / 3),
        ("born in Korvath", ["Korvath", "Velm"], 0.5),
        ("Ana Velm", ["Velm Ana"], 1.0),
        ("nothing here", ["Korvath"], 0.0),
        ("", [""], 1.0),
        (None, ["Korvath"], 0.0),
        ("Korvath", "Korvath", 1.0),
    ],
)
def test_token_f1(prediction, golds, f1):
    assert token_f1(prediction, golds) == pytest.approx(f1)


# Tools


def test_search_and_lookup(domain, docs):
    task = domain.splits()["test"][0]
    box = domain.toolbox(task)
    assert box.names == ("search", "lookup")
    title = task.gold["support"][0]
    results = box.call("search", [title], {})
    assert len(results) == 3 and results[0]["title"] == title and results[0]["text"] == docs[title]
    assert all(set(r) == {"title", "text"} for r in results)
    assert json.loads(json.dumps(results)) == results
    assert box.call("search", [], {"query": title, "k": 1}) == results[:1]
    assert box.call("search", [title, 5], {}) == box.call("search", [title], {"k": 5})
    assert len(box.call("search", ["city born year"], {"k": 50})) == 10  # k is capped
    assert box.call("search", ["zzzqqq xxyyzz"], {}) == []  # no known word: nothing found
    assert box.call("search", ["the of which"], {}) == []  # stopwords only
    assert box.call("lookup", [title], {}) == docs[title]
    assert box.call("lookup", [], {"title": f"  {title.upper()} "}) == docs[title]
    assert isinstance(json.dumps(box.call("lookup", [title], {})), str)
    again = box.call("search", [task.inputs["question"]], {"k": 10})
    assert again == domain.toolbox(task).call("search", [task.inputs["question"]], {"k": 10})


@pytest.mark.parametrize(
    "name, args, kwargs",
    [
        ("search", [], {}),
        ("search", [""], {}),
        ("search", ["   "], {}),
        ("search", ["x" * 501], {}),
        ("search", [3], {}),
        ("search", [None], {}),
        ("search", ["q"], {"k": 0}),
        ("search", ["q"], {"k": -2}),
        ("search", ["q"], {"k": "3"}),
        ("search", ["q"], {"k": 2.5}),
        ("search", ["q"], {"k": True}),
        ("search", ["q", 3, 4], {}),
        ("search", ["q"], {"query": "q"}),
        ("search", ["q"], {"top": 3}),
        ("lookup", [], {}),
        ("lookup", ["No Such Title Anywhere"], {}),
        ("lookup", [""], {}),
        ("lookup", [["a"]], {}),
        ("fetch", ["q"], {}),
    ],
)
def test_tool_errors(domain, name, args, kwargs):
    with pytest.raises(ToolError):
        domain.toolbox(domain.splits()["test"][0]).call(name, args, kwargs)


# User data


def write_jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


CORPUS_ROWS = [
    {"id": "d1", "title": "Qarnel Bridge", "text": "The Qarnel Bridge crosses the Ostra in Velmhaven."},
    {"id": 2, "title": "Velmhaven", "text": "Velmhaven is a port city founded in 1204."},
    {"id": "d3", "title": "Ostra", "text": "The Ostra is a river that flows into the Grey Sea."},
]
QUESTION_ROWS = [
    {"question": "Which river does the Qarnel Bridge cross?", "answer": "Ostra", "id": "x1"},
    "",
    {"question": "When was Velmhaven founded?", "answers": ["1204", "in 1204"], "hops": 1},
    {"question": "Into which sea does the Ostra flow?", "answers": ["Grey Sea"]},
    {"question": "Where is the Qarnel Bridge?", "answer": "Velmhaven"},
]


def test_loader_parses_questions_and_corpus(tmp_path):
    questions_path = write_jsonl(tmp_path / "q.jsonl", QUESTION_ROWS)
    corpus_path = write_jsonl(tmp_path / "c.jsonl", CORPUS_ROWS)
    tasks, documents = load_qa_jsonl(questions_path, corpus_path)
    assert [d.id for d in documents] == ["d1", "2", "d3"]
    assert [t.gold["answers"] for t in tasks] == [["Ostra"], ["1204", "in 1204"], ["Grey Sea"], ["Velmhaven"]]
    assert tasks[0].inputs == {"question": "Which river does the Qarnel Bridge cross?"}
    assert tasks[0].meta["source_id"] == "x1" and tasks[1].meta["hops"] == 1 and tasks[2].meta["hops"] is None

    sizes = {"train": 10, "search": 1, "val": 1, "test": 1}
    domain = SearchQADomain(seed=0, sizes=sizes, questions_path=questions_path, corpus_path=corpus_path)
    splits = domain.splits()
    assert [len(splits[s]) for s in SPLITS] == [1, 1, 1, 1]  # train takes what is left
    assert sorted(questions(all_tasks(splits))) == sorted(questions(tasks))
    box = domain.toolbox(splits["test"][0])
    assert box.call("search", ["Qarnel Bridge river"], {"k": 1})[0]["title"] == "Qarnel Bridge"
    assert box.call("lookup", ["Ostra"], {}) == CORPUS_ROWS[2]["text"]
    with pytest.raises(ValueError, match="too few"):
        SearchQADomain(sizes={"test": 5}, questions_path=questions_path, corpus_path=corpus_path)


@pytest.mark.parametrize(
    "which, row",
    [
        ("questions", '{"question": "q", "answer": "a"'),
        ("questions", "[1, 2]"),
        ("questions", {"answer": "a"}),
        ("questions", {"question": "  ", "answer": "a"}),
        ("questions", {"question": "q"}),
        ("questions", {"question": "q", "answer": 3}),
        ("questions", {"question": "q", "answers": []}),
        ("questions", {"question": "q", "answers": "a"}),
        ("questions", {"question": "q", "answers": ["yes", "!!"]}),
        ("questions", {"question": "q", "answer": "The"}),
        ("corpus", {"title": "t", "text": "x"}),
        ("corpus", {"id": "d1", "title": "dup", "text": "x"}),
        ("corpus", {"id": "d9", "title": "t"}),
        ("corpus", {"id": "d9", "title": "", "text": " "}),
        ("corpus", "not json"),
    ],
)
def test_loader_reports_path_and_line(tmp_path, which, row, capsys):
    """A bad row of either file is skipped by path:line, with a summary (or refused under strict)."""
    questions_rows = [{"question": "q", "answer": "yes"}, ""] + ([row] if which == "questions" else [])
    corpus_rows = [{"id": "d1", "title": "t", "text": "x"}, ""] + ([row] if which == "corpus" else [])
    paths = {
        "questions": write_jsonl(tmp_path / "q.jsonl", questions_rows),
        "corpus": write_jsonl(tmp_path / "c.jsonl", corpus_rows),
    }
    tasks, documents = load_qa_jsonl(paths["questions"], paths["corpus"])
    assert len(tasks) == 1 and tasks[0].meta["answerable"] is False  # "yes" is not in the corpus
    assert [(d.id, d.title) for d in documents] == [("d1", "t")]  # a duplicate id keeps the first row
    err = capsys.readouterr().err
    assert f"{which} loaded 1, skipped 1" in err and "1 with no gold answer in the corpus" in err
    assert f"  skipped {paths[which]}:3: " in err
    with pytest.raises(ValueError) as info:
        load_qa_jsonl(paths["questions"], paths["corpus"], strict=True)
    message = str(info.value)
    assert message.startswith(f"{paths[which]}:3: ") and "\n" not in message


# The seed harness


def knob_values(source: str) -> dict:
    return {name: site.value for name, site in find_knobs(source).items()}


def test_seed_harness_follows_the_rules_and_is_plain(domain):
    source = domain.seed_harness()
    assert problems(source) == []
    assert len(source.splitlines()) <= 100
    values = knob_values(source)
    plain = {"TOP_K": 1, "PASSAGE_CHARS": 200, "QUERY_REWRITE": False, "SECOND_HOP": False}
    assert {name: values[name] for name in plain} == plain
    assert values["EXTRACT_SHORT"] is True and 8 <= values["MAX_TOKENS"] <= 64  # exact match needs a span
    pool = domain.knob_pool()
    assert set(pool) == {name for name, v in values.items() if isinstance(v, str)}
    for name, options in pool.items():
        assert 4 <= len(options) <= 6 and values[name] in options and len(set(options)) == len(options)
        assert all(isinstance(o, str) and len(o.split()) <= 25 for o in options)
        for option in options:
            assert problems(set_knobs(source, {name: option})) == []
    for word in ("search", "lookup", "hard-code", "short span"):
        assert word in domain.brief


class FakeLLM:
    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = []

    def chat(self, messages, max_tokens=None, temperature=None, stop=None, n=1, train=True):
        self.calls.append({"messages": messages, "max_tokens": max_tokens})
        return self.replies.pop(0)


class FakeTools:
    def __init__(self, box):
        self.box = box
        self.queries = []

    def search(self, query, k=3):
        self.queries.append((query, k))
        return self.box.call("search", [query], {"k": k})


def load_harness(domain, **knobs):
    namespace = {}
    exec(compile(set_knobs(domain.seed_harness(), knobs), "searchqa_seed.py", "exec"), namespace)
    return namespace


def test_seed_harness_searches_once_and_answers_from_the_top_passage(domain, docs):
    task = next(t for t in domain.splits()["test"] if t.meta["hops"] == 1)
    harness = load_harness(domain)
    llm, tools = FakeLLM([" It was Korvath.\nMore text"]), FakeTools(domain.toolbox(task))
    assert harness["run"](task.inputs, llm, tools) == "Korvath"  # first line, cut to its answer span
    assert tools.queries == [(task.inputs["question"], 1)]
    (call,) = llm.calls
    prompt = call["messages"][-1]["content"]
    title = task.gold["support"][0]
    assert f"{title}: {docs[title][:200]}" in prompt and task.inputs["question"] in prompt


def test_seed_harness_knobs_rewrite_second_hop_and_shorten(domain):
    task = next(t for t in domain.splits()["test"] if t.meta["hops"] == 2)
    first, bridge = task.gold["support"]
    harness = load_harness(domain, QUERY_REWRITE=True, SECOND_HOP=True, EXTRACT_SHORT=True, TOP_K=2)
    llm = FakeLLM([first, bridge, f"The answer is {task.gold['answers'][0]}."])
    tools = FakeTools(domain.toolbox(task))
    answer = harness["run"](task.inputs, llm, tools)
    assert domain.verify(task, answer, None) == 1.0
    assert [q for q, _ in tools.queries] == [first, bridge]
    final_prompt = llm.calls[-1]["messages"][-1]["content"]
    assert f"{first}: " in final_prompt and f"{bridge}: " in final_prompt


@pytest.mark.parametrize(
    "reply, short",
    [
        ("He was born in Korvath.", "Korvath"),
        ("The answer is 1843.", "1843"),
        ("Answer: Velm River", "Velm River"),
        ("In 1843.", "1843"),
        ("It has about 48,000.", "48,000"),
        ("She was a painter. She moved.", "a painter"),
        ("Korvath", "Korvath"),
        ("", ""),
    ],
)
def test_extract_short(domain, reply, short):
    assert load_harness(domain)["shorten"](reply) == short


class AnswerEngine:
    """Replies with a fixed text; the harness code, the sandbox, the tools and the verifier are tested."""

    weights_version = "w0"

    def __init__(self, text: str):
        self.text = text

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        return [Generation(self.text, [1], [2], "eos") for _ in requests]


@pytest.mark.parametrize(
    "knobs, hops",
    [
        ({}, 1),
        ({}, 2),
        ({"SECOND_HOP": True, "TOP_K": 3}, 2),
        ({"QUERY_REWRITE": True, "EXTRACT_SHORT": True}, 1),
    ],
)
def test_seed_harness_scores_in_the_real_sandbox(domain, knobs, hops):
    task = next(t for t in domain.splits()["val"] if t.meta["hops"] == hops)
    harness = HarnessCandidate("h", set_knobs(domain.seed_harness(), knobs))
    outcomes = {}
    for reply in (task.gold["answers"][0], "Nowhere at all"):
        runner = RolloutRunner(AnswerEngine(reply), domain, SamplingParams(), RunnerLimits(workers=1))
        try:
            (rollout,) = runner.run([RolloutJob(task, harness, 0)])
        finally:
            runner.close()
        assert rollout.error is None
        outcomes[reply] = rollout
    good, bad = outcomes[task.gold["answers"][0]], outcomes["Nowhere at all"]
    assert good.reward == 1.0 and good.answer == task.gold["answers"][0]
    assert bad.reward == 0.0
    searches = [c for c in good.tool_calls if c.name == "search"]
    assert searches and all(c.error is None and c.result for c in searches)
    assert len(searches) == (2 if knobs.get("SECOND_HOP") else 1)
    if not knobs.get("QUERY_REWRITE"):
        assert searches[0].args == [task.inputs["question"]]
