import ast
import json
import re

import pytest

from whale.domains.base import SPLITS
from whale.domains.math import MathDomain, load_gsm8k_jsonl
from whale.domains.math_tools import MathToolbox, calculator
from whale.harness.task import Task, ToolError

SMALL = {"train": 200, "search": 16, "val": 16, "test": 32}
ALLOWED_IMPORTS = {
    "re",
    "math",
    "json",
    "collections",
    "itertools",
    "functools",
    "statistics",
    "random",
    "string",
}


def questions(tasks: list[Task]) -> list[str]:
    return [t.inputs["question"] for t in tasks]


def op_count(expression: str) -> int:
    return len(re.findall(r"[-+*/]", expression))


def test_splits_are_disjoint_deterministic_and_seeded():
    splits = MathDomain(seed=0, sizes=SMALL).splits()
    assert set(splits) == set(SPLITS)
    for split, tasks in splits.items():
        assert len(tasks) == SMALL[split]
        assert [t.id for t in tasks] == [f"math-{split}-{i}" for i in range(SMALL[split])]
        assert len(set(questions(tasks))) == len(tasks)
    all_questions = [q for tasks in splits.values() for q in questions(tasks)]
    assert len(set(all_questions)) == len(all_questions)
    again = MathDomain(seed=0, sizes=SMALL).splits()
    assert all(splits[s] == again[s] for s in SPLITS)
    other = MathDomain(seed=1, sizes=SMALL).splits()
    assert questions(other["test"]) != questions(splits["test"])


def test_eval_splits_do_not_depend_on_train_size():
    small = MathDomain(seed=3, sizes={"train": 5}).splits()
    large = MathDomain(seed=3, sizes={"train": 500}).splits()
    assert small["test"] == large["test"] and small["val"] == large["val"]
    assert not set(questions(large["train"])) & set(questions(large["test"]))


def test_gold_answer_matches_expression_and_stays_in_gold():
    splits = MathDomain(seed=7, sizes=SMALL, levels={s: [1, 2, 3] for s in SPLITS}).splits()
    for task in (t for tasks in splits.values() for t in tasks):
        expression, answer = task.gold["expression"], task.gold["answer"]
        assert re.fullmatch(r"[\d ()+\-*/]+", expression)
        value = eval(expression)  # digits and operators only, checked above
        assert value == answer and isinstance(answer, int) and 0 < answer <= 999
        assert set(task.inputs) == {"question"}
        assert expression not in task.inputs["question"]
        assert sorted(re.findall(r"\d+", expression)) == sorted(re.findall(r"\d+", task.inputs["question"]))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_levels_set_operation_count(level):
    tasks = MathDomain(seed=2, sizes=SMALL, levels={s: [level] for s in SPLITS}).splits()["train"]
    assert {op_count(t.gold["expression"]) for t in tasks} == {level}
    assert {t.meta["level"] for t in tasks} == {level}
    assert {t.gold["expression"].split()[1] for t in tasks} == set("+-*/")


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="level"):
        MathDomain(levels={"train": [4]})
    with pytest.raises(ValueError, match="unknown"):
        MathDomain(sizes={"dev": 3})


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("3 * (4 + 5)", "27"),
        ("8 / 2", "4"),
        ("7 / 2", "3.5"),
        ("2 / 3", "0.666667"),
        ("-2 ** 3", "-8"),
        ("17 // 5 + 17 % 5", "5"),
        ("2^10", "1024"),
        ("12 + 7 =", "19"),
        ("1.5 * 2", "3"),
    ],
)
def test_calculator_evaluates(expression, expected):
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "x + 1",
        "abs(-3)",
        "(1).real",
        "__import__('os')",
        "2 ** 100",
        "10 ** 12 * 10 ** 12",
        "1 / 0",
        "'a' * 3",
        "[1, 2]",
        "lambda: 1",
        "1 +",
        "",
        "9" * 201,
        "True + 1",
        "(-8) ** 0.5",
    ],
)
def test_calculator_refuses(expression):
    with pytest.raises(ToolError):
        calculator(expression)


def test_toolbox_dispatch():
    box = MathToolbox()
    assert box.names == ("calculator", "python")
    assert box.call("calculator", ["6 * 7"], {}) == "42"
    assert box.call("calculator", [], {"expression": "6 * 7"}) == "42"
    for name, args, kwargs in [
        ("search", ["x"], {}),
        ("calculator", [], {}),
        ("calculator", ["1", "2"], {}),
        ("calculator", [], {"expr": "1"}),
        ("calculator", [12], {}),
    ]:
        with pytest.raises(ToolError):
            box.call(name, args, kwargs)


@pytest.mark.parametrize(
    "answer, gold, score",
    [
        ("The answer is 19.", 19, 1.0),
        ("18", 19, 0.0),
        (None, 19, 0.0),
        ("no idea", 19, 0.0),
        ("$1,234.00", 1234, 1.0),
        ("19.0", 19, 1.0),
        ("19.5", 19, 0.0),
        ("12 + 7 = 19", 19, 1.0),
        ("5-3", 3, 1.0),
        ("It is -4", -4, 1.0),
        ("1,2,19", 19, 1.0),
    ],
)
def test_verify(answer, gold, score):
    domain = MathDomain(sizes={s: 1 for s in SPLITS})
    task = Task("t", {"question": "q"}, {"answer": gold, "expression": ""})
    assert domain.verify(task, answer, domain.toolbox(task)) == score


def test_gsm8k_loader(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(
        '{"question": "Ann has 2 pens and buys 3. How many?", "answer": "2 + 3 = 5\\n#### 5"}\n'
        "\n"
        '{"question": "Big?", "answer": "many\\n#### 1,200"}\n'
    )
    tasks = load_gsm8k_jsonl(path)
    assert [t.gold["answer"] for t in tasks] == [5, 1200]
    assert tasks[0].inputs == {"question": "Ann has 2 pens and buys 3. How many?"}
    assert tasks[0].gold["solution"] == "2 + 3 = 5"


@pytest.mark.parametrize(
    "row",
    [
        '{"question": "q", "answer": "no marker"}',
        '{"question": "q"',
        '{"answer": "#### 3"}',
        '{"question": "q", "answer": "#### three"}',
        "[1, 2]",
    ],
)
def test_a_malformed_gsm8k_row_is_skipped_by_line_or_refused_under_strict(tmp_path, row, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "#### 1"}\n\n' + row + "\n")
    assert [t.gold["answer"] for t in load_gsm8k_jsonl(path)] == [1]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"whale: {path}: GSM8K rows loaded 1, skipped 1 (")
    assert err[1].startswith(f"  skipped {path}:3: ")
    with pytest.raises(ValueError) as info:
        load_gsm8k_jsonl(path, strict=True)
    message = str(info.value)
    assert message.startswith(f"{path}:3: ") and "strict" in message and "\n" not in message


# The seed harness, run as the sandbox would: plain objects for llm and tools.


class FakeLLM:
    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = []

    def chat(self, messages, max_tokens=None, temperature=None, stop=None, n=1, train=True):
        self.calls.append({"messages": messages, "max_tokens": max_tokens, "n": n})
        reply = self.replies.pop(0)
        assert (n == 1 and isinstance(reply, str)) or len(reply) == n
        return reply


class FakeTools:
    def __init__(self):
        self.expressions = []

    def calculator(self, expression):
        self.expressions.append(expression)
        return calculator(expression)


def load_harness(**knobs):
    source = MathDomain().seed_harness()
    for name, value in knobs.items():
        source, count = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", source, flags=re.M)
        assert count == 1, name
    namespace = {}
    exec(compile(source, "math_seed.py", "exec"), namespace)
    return namespace


QUESTION = {"question": "Sam has 12 apples and buys 7 more. How many apples does Sam have now?"}


@pytest.mark.parametrize(
    "use_calculator, n_votes, reply, calls",
    [
        (False, 1, "12 + 7 = 19. The answer is 19.", []),
        (False, 3, ["The answer is 19.", "It is 18.", "19.0"], []),
        (True, 1, "Sam buys more.\nExpression: 12 + 7", ["12 + 7"]),
        (
            True,
            3,
            ["Expression: 12 + 7", "Expression: 12 - 7", "Expression: (12 + 7) * 1 = 19"],
            ["12 + 7", "12 - 7", "(12 + 7) * 1"],
        ),
    ],
)
def test_seed_harness_runs(use_calculator, n_votes, reply, calls):
    harness = load_harness(USE_CALCULATOR=use_calculator, N_VOTES=n_votes)
    llm, tools = FakeLLM([reply]), FakeTools()
    assert harness["run"](QUESTION, llm, tools) == "19"
    assert tools.expressions == calls
    assert [(c["n"], c["max_tokens"]) for c in llm.calls] == [(n_votes, 48)]
    assert QUESTION["question"] in llm.calls[0]["messages"][-1]["content"]


def test_seed_harness_retries_and_few_shot():
    harness = load_harness(USE_CALCULATOR=True, RETRIES=1, FEW_SHOT=True)
    llm = FakeLLM(["I think it is 20.", "Expression: 4 * 5 - 1"])
    assert harness["run"](QUESTION, llm, FakeTools()) == "19"
    assert len(llm.calls) == 2
    first, second = (c["messages"] for c in llm.calls)
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user"]
    assert second[-2] == {"role": "assistant", "content": "I think it is 20."}
    no_retry = load_harness(USE_CALCULATOR=True)
    assert no_retry["run"](QUESTION, FakeLLM(["Expression: 12 + apples"]), FakeTools()) == "12"
    assert no_retry["run"](QUESTION, FakeLLM(["no idea"]), FakeTools()) == ""


def test_seed_harness_follows_the_sandbox_rules():
    tree = ast.parse(MathDomain().seed_harness())
    imported = {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert imported <= ALLOWED_IMPORTS and not any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"open", "exec", "eval", "compile", "__import__", "getattr", "globals"}
    assert not any(isinstance(n, ast.Attribute) and n.attr.startswith("_") for n in ast.walk(tree))
    knobs = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id.isupper()
    }
    assert all(isinstance(v, ast.Constant) for v in knobs.values())
    values = {name: v.value for name, v in knobs.items()}
    assert all(type(v) in (str, int, float, bool) for v in values.values())
    plain = {"USE_CALCULATOR": False, "N_VOTES": 1, "RETRIES": 0, "FEW_SHOT": False, "MAX_TOKENS": 48}
    assert {name: values[name] for name in plain} == plain
    pool = MathDomain().knob_pool()
    assert set(pool) == {name for name, v in values.items() if isinstance(v, str)}
    for name, options in pool.items():
        assert 4 <= len(options) <= 6 and values[name] in options
        assert all(isinstance(o, str) and len(o.split()) <= 40 for o in options)


def test_python_tool_runs_code_in_a_sandbox_and_reports_errors():
    box = MathDomain(sizes={"train": 1, "search": 1, "val": 1, "test": 1}, python_timeout_s=2).toolbox(None)
    assert "python" in box.names
    assert box.call("python", ["print(17 * 3)"], {}) == "51\n"
    assert box.call("python", [], {"code": "import math\nprint(math.factorial(5))"}) == "120\n"
    for code, reason in [
        ("while True:\n    pass", "timeout"),
        ("import os\nprint(os.getcwd())", "import of 'os'"),
        ("print(1 / 0)", "ZeroDivisionError"),
        ("x = 'a' * (2**34)", "MemoryError"),
        ("print((lambda: (yield))().gi_frame)", "introspection"),
    ]:
        with pytest.raises(ToolError, match=reason):
            box.call("python", [code], {})
    with pytest.raises(ToolError, match="exactly one argument"):
        box.call("python", ["print(1)", "extra"], {})


def test_gsm8k_file_is_dealt_into_disjoint_splits(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    rows = [
        {"question": f"What is {i} plus {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}
        for i in range(20)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    sizes = {"train": 100, "search": 3, "val": 3, "test": 4}
    with pytest.raises(ValueError, match="train gets 10 of the 100 questions asked for"):
        MathDomain(sizes=sizes, gsm8k_path=str(path))
    domain = MathDomain(sizes=sizes, gsm8k_path=str(path), allow_short=True)
    splits = domain.splits()
    assert [len(splits[s]) for s in ("train", "search", "val", "test")] == [10, 3, 3, 4]
    questions = [t.inputs["question"] for s in splits.values() for t in s]
    assert len(questions) == len(set(questions)) == 20
    task = splits["test"][0]
    assert domain.verify(task, f"so the answer is {task.gold['answer']}", None) == 1.0
    with pytest.raises(ValueError, match="not enough for the search split"):
        MathDomain(sizes={"train": 1, "search": 10, "val": 10, "test": 10}, gsm8k_path=str(path))
