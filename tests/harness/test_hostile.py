"""Hostile harnesses: nothing escapes. Each one runs through a real RolloutRunner with real sandbox worker
processes, in the same `run` call as good harnesses that must keep their rewards (and come after it, on
the worker it used if that worker is kept). Each asserts the recorded reason, that no file appeared, that
no gold reached the record, and that no worker process outlives the runner.

Many sources are rejected by the static checks (validate.py); the runner does not validate, so those
exercise the runtime layers as if a trick had slipped past the checker. `static` records which is which.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.processes import group_alive
from whale.harness import confine, landlock, launcher, pysandbox, restricted, seccomp, validate
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.runner import RolloutRunner
from whale.model.engine import Generation, GenerationRequest, SamplingParams

SECRET = "GOLD-SECRET-7f3a"  # the marker conftest's AddDomain keeps in every Task.gold
SAMPLING = SamplingParams(temperature=0.7, max_tokens=4)
LIMITS = {"workers": 1, "step_timeout_s": 2.0, "rollout_timeout_s": 8.0, "memory_mb": 256}
ROOT = Path(__file__).resolve().parents[2]
W = "print.__globals__"  # the worker module's globals: one dunder away, past the static checks

# Also checks that the shared modules are as they should be: a hostile harness that ran before it on the
# same worker must not have changed them.
GOOD = """\
import collections, json, re, string
def run(task, llm, tools):
    checks = [collections.Counter("abca").most_common(1) == [("a", 2)], json.dumps([1]) == "[1]",
              re.findall("a", "aa") == ["a", "a"], string.capwords("a b") == "A B"]
    if not all(checks):
        return "contaminated"
    llm.chat([{"role": "user", "content": "add " + str(task["a"]) + " and " + str(task["b"])}])
    return str(tools.add(task["a"], task["b"]))
"""


def body(*lines: str) -> str:
    return "def run(task, llm, tools):\n" + "".join(f"    {line}\n" for line in lines)


class SlowEngine:
    """Takes its time over every batch: a harness waiting on the model uses no CPU, only wall clock."""

    weights_version = "w-slow"

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        time.sleep(0.2)
        return [Generation("ok", [1], [2, 3], "length") for _ in requests]


def no_model_calls(r: Rollout) -> None:
    assert r.calls == []  # a patched llm.chat reached no engine, so nothing was recorded


def logs_capped(r: Rollout) -> None:
    assert sum(len(x) for x in r.logs) <= restricted.MAX_LOG_CHARS + 200
    assert "characters of output dropped" in r.logs[-1]


def no_foreign_functions(r: Rollout) -> None:
    assert r.answer == "[][]", f"a foreign-function interface is loaded in the worker: {r.answer}"


def error_short(r: Rollout) -> None:
    assert len(r.error) <= 600


def tool_calls_capped(r: Rollout) -> None:
    assert len(r.tool_calls) == RunnerLimits().max_tool_calls + 1  # the first refusal is recorded, no more


def tool_args_dropped(r: Rollout) -> None:
    (call,) = r.tool_calls
    assert len(call.args) == 1 and "characters of arguments dropped" in call.args[0] and call.kwargs == {}


def only_text(r: Rollout) -> None:
    assert "<class 'dict'>" in r.answer  # str.format reads attributes, but yields text, never objects


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    reason: str | None  # a regex the recorded error matches from its start; None: no error is due
    static: bool  # whether the static checks reject the source
    limits: dict[str, Any] = field(default_factory=dict)
    check: Callable[[Rollout], None] | None = None
    slow_model: bool = False


CASES = [
    # files, imports and the module proxies
    Case("open_builtin", body("open(TARGET, 'w').write('x')"), r"crash: NameError: name 'open' is not", True),
    Case(
        "import_os",
        "import os\n" + body("os.system('touch ' + TARGET)"),
        r"forbidden: import of 'os' \(ImportError\)$",
        True,
    ),
    Case(
        "import_built_name",
        body("__import__('o' + 's').system('touch ' + TARGET)"),
        r"forbidden: import of 'os'",
        True,
    ),
    Case(
        "builtins_dict_import",
        body("__builtins__['__import__']('subprocess').run(['touch', TARGET])"),
        r"forbidden: import of 'subprocess'",
        True,
    ),
    Case(
        "module_private_attribute",
        "import random\n" + body("random._os.system('touch ' + TARGET)"),
        r"crash: AttributeError: .*'_os'",
        True,
    ),
    Case(
        "module_submodule",
        "import json\n" + body("json.codecs.open(TARGET, 'w').write('x')"),
        r"crash: AttributeError: .*'codecs'",
        False,
    ),
    Case(
        "from_import_private",
        "from random import _os\n" + body("_os.system('touch ' + TARGET)"),
        r"crash: ImportError: cannot import name '_os'",
        True,
    ),
    Case(
        "homoglyph_open",
        body("ｏｐｅｎ(TARGET, 'w').write('x')"),
        r"crash: NameError: name 'open' is not",
        True,
    ),
    Case(
        "homoglyph_getattr",
        body("ｇｅｔａｔｔｒ(print, '_' * 2 + 'globals__')"),
        r"crash: NameError: name 'getattr'",
        True,
    ),
    Case(
        "homoglyph_underscores",
        body("＿＿import＿＿('os')"),
        r"invalid: SyntaxError: invalid character '＿'",
        True,
    ),
    # getattr by another name: gadgets in allowed modules that pass the static checks
    Case(
        "formatter_get_field",
        "import string\n"
        + body(
            "fields = string.Formatter()",
            "worker = fields.get_field('0.__globals__', [print], {})[0]",
            "worker['os'].system('touch ' + TARGET)",
        ),
        r"crash: ValueError: attribute lookup in format fields is not allowed",
        False,
    ),
    Case(
        "format_string_attributes",
        body("return '{0.__class__} {1.__globals__}'.format(task, print)"),
        None,
        False,
        check=only_text,
    ),
    Case(
        "update_wrapper_reads_globals",
        "import functools\n"
        + body(
            "def holder():",
            "    pass",
            "functools.update_wrapper(holder, print, assigned=(), updated=('__globals__',))",
            "os.system('touch ' + TARGET)",
        ),
        r"crash: ValueError: update_wrapper/wraps with other attribute names",
        False,
    ),
    Case(
        "singledispatch_evaluates_annotations",
        "import functools\n"
        + body(
            "@functools.singledispatch",
            "def f(x):",
            "    return x",
            "@f.register",
            "def g(x: \"print.__globals__['os'].system('touch ' + TARGET) or int\"):",
            "    return x",
        ),
        r"crash: AttributeError: .*singledispatch",
        False,
    ),
    # walks to the worker's own modules, and what the audit hook makes of them
    Case(
        "subclasses_walk_to_os",
        body(
            "for cls in ().__class__.__base__.__subclasses__():",
            "    if cls.__name__ == '_wrap_close':",
            "        cls.__init__.__globals__['system']('touch ' + TARGET)",
        ),
        r"forbidden: os\.system$",
        True,
    ),
    Case(
        "rewrite_worker_globals",
        body(
            f"worker = {W}",
            "worker['BLOCKED_EVENT_PREFIXES'] = ()",
            "worker['forbid_system_access'] = None",
            "os = worker['os']",
            "os.close(os.open(TARGET, os.O_CREAT | os.O_WRONLY, 420))",
        ),
        r"forbidden: open$",
        True,
    ),
    Case(
        "swap_the_audit_hook_code",
        body(
            f"real = {W}['builtins']",
            "code = real.compile('def hook(event, args):\\n    pass\\n', 'x', 'exec').co_consts[0]",
            f"real.setattr({W}['forbid_system_access'], '__code__', code)",
            f"{W}['os'].system('touch ' + TARGET)",
        ),
        r"forbidden: object\.__setattr__$",
        True,
    ),
    Case(
        "catch_the_refusal_and_carry_on",
        body(
            f"os = {W}['os']",
            "try:",
            "    os.system('touch ' + TARGET)",
            "except Exception:",
            "    pass",
            "return str(tools.add(task['a'], task['b']))",
        ),
        r"forbidden: os\.system$",
        True,
    ),
    Case(
        "generator_frame_walk",
        body(
            "def frames():",
            "    yield walker.gi_frame.f_back",
            "walker = frames()",
            "frame = next(walker)",
            "while frame is not None and 'os' not in frame.f_globals:",
            "    frame = frame.f_back",
            "frame.f_globals['os'].system('touch ' + TARGET)",
        ),
        r"forbidden: object\.__getattr__$",
        True,
    ),
    Case(
        "traceback_frame_walk",
        body(
            "try:",
            "    1 / 0",
            "except ZeroDivisionError as exc:",
            "    frame = exc.__traceback__.tb_frame",
            "frame.f_back.f_globals['os'].system('touch ' + TARGET)",
        ),
        r"forbidden: object\.__getattr__$",
        True,
    ),
    Case(
        "coroutine_frame",
        body(
            "async def co():",
            "    pass",
            "c = co()",
            "frame = c.cr_frame",
            "frame.f_globals['os'].system('x')",
        ),
        r"forbidden: object\.__getattr__$",
        True,
    ),
    Case(
        "match_class_reads_attributes",
        body(
            "try:",
            "    tools.add('x')",
            "except ToolError as exc:",
            "    match exc:",
            "        case ToolError(__traceback__=tb):",
            "            return '{0.tb_frame.f_globals}'.format(tb)",
        ),
        r"forbidden: object\.__getattr__$",
        True,
    ),
    Case(
        "sys_getframe",
        body(f"caller = {W}['sys']._getframe(1)", "caller.f_locals['msg']['secret']"),
        r"forbidden: sys\._getframe$",
        True,
    ),
    # gold, data files, the parent
    Case(
        "look_for_gold_and_data_files",
        body(f"os = {W}['os']", "return str([os.listdir(path) for path in ('.', '/work', '/tmp')])"),
        r"forbidden: os\.listdir$",
        True,
    ),
    Case(
        "read_parent_memory",
        body(
            f"io = {W}['sys'].modules['io']",
            f"return io.open('/proc/' + str({W}['os'].getppid()) + '/environ').read()",
        ),
        r"forbidden: open$",
        True,
    ),
    # network, processes, threads
    Case(
        "socket_import",
        body(f"socket = {W}['builtins'].__import__('socket')", "socket.create_connection(('127.0.0.1', 9))"),
        r"forbidden: import$",
        True,
    ),
    Case(
        "posix_spawn",
        body(
            f"posix = {W}['sys'].modules['posix']", "posix.posix_spawn('/bin/touch', ['touch', TARGET], {})"
        ),
        r"forbidden: os\.posix_spawn$",
        True,
    ),
    Case("fork_bomb", body(f"os = {W}['os']", "while True:", "    os.fork()"), r"forbidden: os\.fork$", True),
    # the launcher applies the OS layers before the worker's Python starts, so no foreign-function
    # interface is loaded in it: nothing to call C functions or write memory with, however it is reached
    Case(
        "ctypes_system",
        body(
            f"ctypes = {W}['sys'].modules['ctypes']", "ctypes.CDLL(None).system(b'touch ' + TARGET.encode())"
        ),
        r"crash: KeyError: 'ctypes'$",
        True,
    ),
    Case(
        "ctypes_anywhere",
        body(
            f"names = sorted(name for name in {W}['sys'].modules if 'ctypes' in name or 'ffi' in name)",
            f"loaded = [str(c) for c in {W}['builtins'].object.__subclasses__() if 'ctypes' in str(c)]",
            "return str(names) + str(loaded)",
        ),
        None,
        True,
        check=no_foreign_functions,
    ),
    Case(
        "start_a_thread",
        body(
            "def spin():",
            "    while True:",
            "        pass",
            f"{W}['_thread'].start_new_thread(spin, ())",
            "return str(tools.add(task['a'], task['b']))",
        ),
        r"crash: RuntimeError: can't start new thread$|forbidden: started a thread$",
        True,
    ),
    # resources
    Case("memory_bomb_string", body("blob = 'a' * (1 << 34)"), r"memory limit: MemoryError", False),
    Case(
        "memory_bomb_list",
        body("x = []", "while True:", "    x.append('a' * 10**7)"),
        r"memory limit: ",
        False,
    ),
    Case("infinite_loop", body("while True:", "    pass"), r"timeout: harness computed 2s", False),
    Case(
        "cpu_time_limit",
        body("while True:", "    pass"),
        r"cpu limit: ",
        False,
        limits={"cpu_s": 1, "step_timeout_s": 10.0},
    ),
    Case(
        "wait_on_the_model_forever",
        body("while True:", "    llm.chat([{'role': 'user', 'content': 'again'}])"),
        r"timeout: rollout ran over 1\.5s",
        False,
        limits={"rollout_timeout_s": 1.5, "max_model_calls": 1000},
        slow_model=True,
    ),
    Case("block_on_the_channel", body("llm._channel.recv()"), r"timeout: harness computed", True),
    Case(
        "spin_on_refused_tool_calls",
        body("while True:", "    try:", "        tools.add(1, 2)", "    except ToolError:", "        pass"),
        r"timeout: harness computed",
        False,
        check=tool_calls_capped,
    ),
    Case(
        "finalizer_that_never_ends",
        body(
            "class Trap:",
            "    def __del__(self):",
            "        while True:",
            "            pass",
            "a, b = Trap(), Trap()",
            "a.other, b.other = b, a",
            "return str(tools.add(task['a'], task['b']))",
        ),
        r"timeout: harness computed",
        False,
    ),
    Case(
        "deep_recursion",
        body("def down(n):", "    return down(n + 1)", "return down(0)"),
        r"recursion limit: ",
        False,
    ),
    Case(
        "deep_nesting_in_c",
        "import json\n" + body("x = []", "for _ in range(100000):", "    x = [x]", "return json.dumps(x)"),
        r"recursion limit: RecursionError",
        False,
    ),
    # output and the size of the record
    Case(
        "print_megabytes",
        body(
            "for _ in range(50):", "    print('x' * 1_000_000)", "return str(tools.add(task['a'], task['b']))"
        ),
        None,
        False,
        check=logs_capped,
    ),
    Case(
        "huge_answer",
        body("return 'a' * (2 << 20)"),
        r"output too large: run\(\) returned 2097152 characters",
        False,
    ),
    Case("gigantic_answer", body("return 'a' * (6 << 20)"), r"protocol: output too large: ", False),
    Case(
        "huge_exception_message",
        body("raise ValueError('x' * 10**7)"),
        r"crash: ValueError: x+$",
        False,
        check=error_short,
    ),
    Case(
        "exception_that_cannot_print",
        body("class Nasty(Exception):", "    def __str__(self):", "        raise Nasty()", "raise Nasty()"),
        r"crash: Nasty: <the exception's message could not be printed>$",
        False,
    ),
    Case(
        "huge_prompt",
        body("return llm.chat([{'role': 'user', 'content': 'x' * 200000}])"),
        r"crash: LLMError: llm\.chat: the messages are 200004 characters",
        False,
    ),
    Case(
        "tool_argument_flood",
        body("return str(tools.add(*([1] * 100000)))"),
        r"crash: ToolError: tool arguments are \d+ characters",
        False,
        check=tool_args_dropped,
    ),
    Case(
        "nan_temperature",
        body("return llm.chat([{'role': 'user', 'content': 'hi'}], temperature=float('nan'))"),
        r"crash: LLMError: llm\.chat: temperature must be a finite number",
        False,
    ),
    # exits and interrupts
    Case("system_exit", body(f"raise {W}['builtins'].SystemExit(3)"), r"crash: SystemExit: 3$", True),
    Case(
        "keyboard_interrupt",
        body(f"raise {W}['builtins'].KeyboardInterrupt()"),
        r"crash: KeyboardInterrupt$",
        True,
    ),
    Case(
        "base_exception",
        body(f"raise {W}['builtins'].BaseException('out')"),
        r"crash: BaseException: out$",
        True,
    ),
    # forging records, and state that would outlive the rollout
    Case(
        "replace_llm_chat",
        body("llm.chat = lambda *args, **kwargs: 'forged'", "return llm.chat([])"),
        r"crash: AttributeError: cannot set 'chat': llm is read-only",
        False,
    ),
    Case(
        "replace_a_tool",
        body("tools.add = lambda a, b: 999", "return str(tools.add(1, 2))"),
        r"crash: AttributeError: cannot set 'add'",
        False,
    ),
    Case(
        "replace_a_module_function",
        "import json\n" + body("json.dumps = lambda *args, **kwargs: 'forged'"),
        r"crash: AttributeError: cannot set 'dumps'",
        False,
    ),
    Case(
        "patch_a_shared_stdlib_class",
        "import collections\n"
        + body(
            "collections.Counter.most_common = lambda self, n=None: [('z', 0)]",
            "return str(task['a'] + task['b'])",
        ),
        r"forbidden: changed shared state: collections\.Counter\.most_common$",
        False,
    ),
    Case(
        "patch_the_llm_class",
        body(
            "llm.__class__.chat = lambda self, *args, **kwargs: 'forged'",
            "llm.chat([{'role': 'user', 'content': 'hi'}])",
            "return str(task['a'] + task['b'])",
        ),
        r"forbidden: changed shared state: __main__\.LLMProxy\.chat$",
        True,
        check=no_model_calls,
    ),
    Case(
        "poison_the_next_rollout",
        body(f"{W}['make_builtins'] = lambda proxies, logs: {{}}", "return str(task['a'] + task['b'])"),
        r"forbidden: changed shared state: __main__\.make_builtins$",
        True,
    ),
    Case(
        "forge_a_done_message",
        body(
            "answer = str(task['a'] + task['b'])",
            "llm._channel.send({'op': 'done', 'answer': answer, 'error': None, 'logs': [], 'retire': False})",
            "return 'slow'",
        ),
        r"protocol: a done message without this job's secret",
        True,
    ),
    Case(
        "garbage_on_the_channel",
        body("llm._channel.w.write(bytes([0, 0, 0, 5]) + b'hello')", "return '1'"),
        r"protocol: unreadable message \(JSONDecodeError\)$",
        True,
    ),
    # the parent trusts nothing it reads (issue 23)
    Case(
        "one_deeply_nested_frame",
        body(
            "data = b'[' * 200_000",
            "llm._channel.w.write(len(data).to_bytes(4, 'big') + data)",
            "llm._channel.w.flush()",
            "return '1'",
        ),  # fmt: skip
        r"protocol: unreadable message \(RecursionError\)$",
        True,
    ),
    Case(
        "flood_of_requests_never_reading_the_replies",
        body(  # each malformed chat is refused at once, so the refusals pile up unread
            'frame = b\'{"op": "chat", "messages": []}\'',
            "for _ in range(60_000):",
            "    llm._channel.w.write(len(frame).to_bytes(4, 'big') + frame)",
            "llm._channel.w.flush()",
            "return '1'",
        ),  # fmt: skip
        r"protocol: the worker stopped reading what it is sent$",
        True,
    ),
    Case(
        "a_second_tool_call_before_the_first_is_answered",
        body(
            'frame = b\'{"op": "tool", "name": "add", "args": [1, 2], "kwargs": {}}\'',
            "llm._channel.w.write((len(frame).to_bytes(4, 'big') + frame) * 2)",
            "llm._channel.w.flush()",
            "return '1'",
        ),  # fmt: skip
        r"protocol: a tool request before the reply to the one in flight$",
        True,
    ),
    Case(
        "a_second_chat_before_the_first_is_answered",
        body(
            'frame = b\'{"op": "chat", "messages": [{"role": "user", "content": "x"}]}\'',
            "llm._channel.w.write((len(frame).to_bytes(4, 'big') + frame) * 2)",
            "llm._channel.w.flush()",
            "return '1'",
        ),  # fmt: skip
        r"protocol: a chat request before the reply to the one in flight$",
        True,
    ),
]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory hostile harnesses aim at; it must stay empty."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


def run_beside_good_ones(case: Case, source: str, add_domain: Any, engine: Any) -> tuple[list[Rollout], list]:
    runner = RolloutRunner(engine, add_domain, SAMPLING, RunnerLimits(**{**LIMITS, **case.limits}), seed=1)
    spawned = []
    spawn = runner._spawn

    def recording_spawn():
        w = spawn()
        spawned.append(w.proc)
        return w

    runner._spawn = recording_spawn
    good = HarnessCandidate("good", GOOD)
    tasks = add_domain.tasks
    try:
        jobs = [RolloutJob(tasks[1], HarnessCandidate(case.name, source), 0)]
        jobs += [RolloutJob(t, good, 0) for t in tasks[2:4]]
        rollouts = runner.run(jobs)
        assert runner.sandbox_problems == [] or landlock.abi_version() < 4
    finally:
        runner.close()
    return rollouts, spawned


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_harness_is_contained(case: Case, outside: Path, add_domain, fake_engine) -> None:
    target = outside / "pwned.txt"
    source = case.source.replace("TARGET", repr(str(target)))
    assert bool(validate.problems(source)) == case.static, validate.problems(source)
    engine = SlowEngine() if case.slow_model else fake_engine
    (hostile, *goods), spawned = run_beside_good_ones(case, source, add_domain, engine)

    if case.reason is None:
        assert hostile.error is None
    else:
        assert hostile.error is not None and re.match(case.reason, hostile.error), hostile.error
        assert hostile.answer is None and hostile.reward == 0.0
    if case.check:
        case.check(hostile)
    for r, t in zip(goods, add_domain.tasks[2:4], strict=True):  # the rollouts beside it are unharmed
        assert (r.error, r.answer, r.reward) == (None, t.gold["answer"], 1.0)
    assert list(outside.iterdir()) == [] and not Path("/pwned.txt").exists()
    record = json.dumps(hostile.to_json())
    assert SECRET not in record
    assert len(record) < 250_000  # a bounded trace, whatever the harness did
    assert spawned and all(p.poll() is not None and not group_alive(p.pid) for p in spawned)


def test_the_cases_cover_the_brief() -> None:
    assert len(CASES) >= 25 and len({c.name for c in CASES}) == len(CASES)
    assert sum(not c.static for c in CASES) >= 15  # many pass the static checks: the runtime layers decide


INNOCENT = """\
import collections, functools, json, random, re, string
class Noisy:
    def __del__(self):
        raise ValueError("a finalizer that fails is printed nowhere, and is no attack")
@functools.total_ordering
class Box:
    size = 0
    def __init__(self, n):
        self.n = n
    def __eq__(self, other):
        return self.n == other.n
    def __lt__(self, other):
        return self.n < other.n
def logged(f):
    @functools.wraps(f)
    def inner(*args):
        return f(*args)
    return inner
@logged
def run(task, llm, tools):
    π = 3.14159
    a, b = Noisy(), Noisy()
    a.other, b.other = b, a
    Box.size = 2
    random.seed(task["a"])
    Point = collections.namedtuple("Point", "x y")
    checks = [re.sub("[[]", "x", "[") == "x", sorted([Box(2), Box(1)])[0].n == 1, Point(1, 2).y == 2,
              string.Formatter().format("{0[k]}", {"k": "v"}) == "v", json.loads("[1]") == [1], π > 3]
    if not all(checks):
        return "broken"
    return str(tools.add(task["a"], task["b"]))
"""


def test_innocent_oddities_are_not_taken_for_attacks(add_domain, fake_engine) -> None:
    """Warnings, failing finalizers, non-ASCII names, namedtuple, wraps, attributes on the harness's own
    classes: none of it is a forbidden operation, and the one worker serves every rollout."""
    assert validate.problems(INNOCENT) == []
    runner = RolloutRunner(fake_engine, add_domain, SAMPLING, RunnerLimits(workers=1))
    try:
        rollouts = runner.run(
            [RolloutJob(t, HarnessCandidate("innocent", INNOCENT), 0) for t in add_domain.tasks]
        )
        assert len(runner.idle) == 1
    finally:
        runner.close()
    assert [(r.error, r.reward) for r in rollouts] == [(None, 1.0)] * len(add_domain.tasks)


# ---- the OS layer on its own ---------------------------------------------------------------------------

PROBE = """
import json, os, socket, sys
from whale.harness import launcher
status, _ = launcher.apply_layers(launcher.loaded_files(), 0)
out = {"status": status}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = type(exc).__name__
attempt("write", lambda: open(os.path.join(sys.argv[1], "written.txt"), "w").close())
attempt("read", lambda: open(os.path.join(sys.argv[1], "readable.txt")).read())
attempt("connect", lambda: socket.socket().connect(("127.0.0.1", int(sys.argv[2]))))
attempt("bind", lambda: socket.socket().bind(("127.0.0.1", 0)))
print(json.dumps(out))
"""


def probe(directory: str, port: int, landlock_setting: str, netns_setting: str = "off") -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "WHALE_LANDLOCK": landlock_setting}
    env["WHALE_NETNS"] = netns_setting  # one layer at a time: the namespace would refuse the sockets too
    env["WHALE_SECCOMP"] = "off"  # and so would seccomp
    done = subprocess.run(
        [sys.executable, "-s", "-c", PROBE, directory, str(port)],
        capture_output=True, text=True, env=env, cwd="/", timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(landlock.abi_version() < 1, reason="Landlock is not available on this kernel")
def test_landlock_alone_refuses_files_and_tcp_that_permissions_allow() -> None:
    """Without the audit hook or the restricted builtins: a world-writable directory, a world-readable
    file and a listening local port are all usable by the same process unconfined, and refused once
    the launcher's layers are applied."""
    directory = tempfile.mkdtemp(prefix="whale-hostile-")
    try:
        os.chmod(directory, 0o777)
        Path(directory, "readable.txt").write_text("public")
        os.chmod(Path(directory, "readable.txt"), 0o644)
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(8)
            port = server.getsockname()[1]
            free = probe(directory, port, "off")
            confined = probe(directory, port, "on")
        assert "Landlock disabled by WHALE_LANDLOCK=off" in free["status"]["problems"]
        assert (free["write"], free["read"], free["connect"], free["bind"]) == ("ok", "ok", "ok", "ok")
        abi = landlock.abi_version()
        assert confined["status"]["landlock"] == abi and confined["status"]["filesystem"] is True
        assert (confined["write"], confined["read"]) == ("PermissionError", "PermissionError")
        if abi >= 4:
            assert confined["status"]["network"] is True
            assert confined["status"]["problems"] == [
                "network namespace disabled by WHALE_NETNS=off",
                "seccomp disabled by WHALE_SECCOMP=off",
            ]
            assert (confined["connect"], confined["bind"]) == ("PermissionError", "PermissionError")
        if os.geteuid() == 0:
            assert confined["status"]["uid"] == launcher.NOBODY
    finally:
        shutil.rmtree(directory)


def test_the_network_namespace_alone_refuses_a_local_port_that_is_listening() -> None:
    """Landlock and seccomp off: a worker in its own network namespace cannot reach the host's loopback
    (its own is down), while the same probe outside one connects."""
    directory = tempfile.mkdtemp(prefix="whale-hostile-")
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(8)
            port = server.getsockname()[1]
            free = probe(directory, port, "off")
            isolated = probe(directory, port, "off", netns_setting="on")
    finally:
        shutil.rmtree(directory)
    assert free["status"]["netns"] is False and (free["connect"], free["bind"]) == ("ok", "ok")
    if not isolated["status"]["netns"]:
        pytest.skip(f"no network namespace here: {isolated['status']['problems']}")
    assert isolated["connect"] == "OSError"  # ENETUNREACH: the namespace's loopback is down


@pytest.mark.skipif(landlock.abi_version() < 1, reason="Landlock is not available on this kernel")
def test_workers_report_the_sandbox_they_run_in(add_domain, fake_engine) -> None:
    runner = RolloutRunner(fake_engine, add_domain, SAMPLING, RunnerLimits(workers=1))
    try:
        (r,) = runner.run([RolloutJob(add_domain.tasks[0], HarnessCandidate("good", GOOD), 0)])
    finally:
        runner.close()
    assert r.reward == 1.0
    abi = landlock.abi_version()
    assert runner.sandbox["landlock"] == abi and runner.sandbox["filesystem"] is True
    assert runner.sandbox["network"] is (abi >= 4)
    assert runner.sandbox["seccomp"] is seccomp.supported()
    assert runner.sandbox["netns"] is True
    assert runner.sandbox["ctypes"] is False and runner.sandbox["uid"] == (
        launcher.NOBODY if os.geteuid() == 0 else os.geteuid()
    )
    assert runner.sandbox_problems == ([] if abi >= 4 else [f"Landlock ABI {abi} < 4: TCP is not restricted"])


def test_a_missing_os_sandbox_is_reported_loudly_once(add_domain, fake_engine, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WHALE_LANDLOCK", "off")
    monkeypatch.setattr(confine, "_REPORTED", set())
    runner = RolloutRunner(fake_engine, add_domain, SAMPLING, RunnerLimits(workers=2))
    try:
        rollouts = runner.run(
            [RolloutJob(t, HarnessCandidate("good", GOOD), 0) for t in add_domain.tasks[:4]]
        )
    finally:
        runner.close()
    assert all(r.error is None and r.reward == 1.0 for r in rollouts)  # it degrades, it does not stop
    assert runner.sandbox_problems == ["Landlock disabled by WHALE_LANDLOCK=off"]
    assert pysandbox.run_python("print(6 * 7)") == "42\n"
    assert pysandbox.run_python("print(1)") == "1\n"
    err = capsys.readouterr().err.splitlines()
    problem = "run with a weaker sandbox: Landlock disabled by WHALE_LANDLOCK=off"
    assert err == [
        f"whale: warning: harness workers {problem}",
        f"whale: warning: python tool snippets {problem}",
    ]


# ---- the math python tool's one-shot mode --------------------------------------------------------------

SNIPPETS = [
    (
        "import string\nprint(string.Formatter().get_field('0.__globals__', [print], {}))",
        "ValueError: attribute",
    ),
    (
        "import functools\nfunctools.update_wrapper(print, print, updated=('__globals__',))",
        "ValueError: update",
    ),
    ("import collections\ncollections.Counter.most_common = None\nprint(collections.Counter('a'))", None),
    ("x = 'a' * (1 << 34)", "MemoryError"),
    ("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError"),
    ("while True:\n    pass", "timeout"),
    (
        "class E(Exception):\n    def __str__(self):\n        raise E()\nraise E()",
        "E: <the exception's message",
    ),
]


@pytest.mark.parametrize("code,error", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_python_tool_snippets_are_contained(code: str, error: str | None) -> None:
    assert validate.code_problems(code) == []  # all of them pass the static checks
    if error is None:  # patching a class in a one-shot process harms nobody: the process is gone after
        assert pysandbox.run_python(code, timeout_s=3) == "Counter({'a': 1})\n"
        return
    with pytest.raises(pysandbox.ToolError, match=re.escape(error)):
        pysandbox.run_python(code, timeout_s=3)


def test_python_tool_output_is_capped() -> None:
    out = pysandbox.run_python("for i in range(100):\n    print('x' * 100000)")
    assert len(out) == pysandbox.MAX_OUTPUT


# ---- a domain that raises on what a harness sends must not take the run down ---------------------------


def test_tools_and_verifiers_that_raise_fail_only_their_rollout(add_domain, fake_engine) -> None:
    class Fragile(type(add_domain)):
        def toolbox(self, task):
            box = super().toolbox(task)
            call = box.call

            def fragile_call(name, args, kwargs):
                if args == [0, 0]:
                    raise ZeroDivisionError("the tool fell over")
                return call(name, args, kwargs)

            box.call = fragile_call
            return box

        def verify(self, task, answer, toolbox):
            if answer == "boom":
                raise OverflowError("the verifier fell over")
            if answer in ("nan", "2"):
                return float(answer)
            return super().verify(task, answer, toolbox)

    domain = Fragile()
    runner = RolloutRunner(fake_engine, domain, SAMPLING, RunnerLimits(workers=2))
    try:
        jobs = [
            RolloutJob(domain.tasks[1], HarnessCandidate("tool", body("return str(tools.add(0, 0))")), 0),
            RolloutJob(domain.tasks[1], HarnessCandidate("verify", body("return 'boom'")), 0),
            RolloutJob(domain.tasks[1], HarnessCandidate("nan", body("return 'nan'")), 0),
            RolloutJob(domain.tasks[1], HarnessCandidate("two", body("return '2'")), 0),
            RolloutJob(domain.tasks[2], HarnessCandidate("good", GOOD), 0),
        ]
        tool, verify, nan, two, good = runner.run(jobs)
    finally:
        runner.close()
    assert tool.error == "crash: ToolError: tool add failed: ZeroDivisionError: the tool fell over"
    assert verify.error == "verify: the verifier raised OverflowError: the verifier fell over"
    assert verify.reward == 0.0
    assert (nan.error, nan.reward) == ("verify: the verifier returned nan, outside [0, 1]", 0.0)
    assert (two.error, two.reward) == ("verify: the verifier returned 2.0, outside [0, 1]", 0.0)
    assert (good.error, good.reward) == (None, 1.0)
