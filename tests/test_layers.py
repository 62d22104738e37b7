"""The layering rule, read from the imports: a package imports only from the layers below it (or itself),
no two modules import each other even through a chain, no module of whale/ outgrows 450 lines, and no
two modules share a file name.

Every import counts, including those inside functions: a lazy import hides a dependency from start-up
time, not from the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WHALE = Path(__file__).resolve().parents[1] / "whale"

# Lowest first. A package may import its own modules and those of any earlier line; packages on one
# line are peers and may not import each other.
LAYERS = (
    ("core",),  # settings, atomic files, statistics, progress bars, the OpenAI wire format
    ("model",),  # engines, trainer, losses
    ("harness",),  # the harness contract, the sandbox, the rollout runner
    ("domains",),  # task families: splits, tools, verifiers, seed harnesses
    ("rollout",),  # who runs rollout jobs: in process or on Ray actors
    ("weights", "search"),  # the two phases: one weight step, one harness-search step
    ("run",),  # one run: schedule, budget, evaluation, the run folder, the loop
    ("studies", "deploy", "bench"),  # comparisons and results; agents, bundles, serving; benchmarks
    ("report",),  # the HTML report of a run or a comparison
    ("cli",),  # the `whale` command
)
RANK = {package: rank for rank, line in enumerate(LAYERS) for package in line}
MAX_LINES = 450


def module_name(path: Path) -> str:
    parts = path.relative_to(WHALE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(WHALE.rglob("*.py")) if "harnesses" not in p.parts}


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The whale modules that `path` (module `name`) imports, anywhere in its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from whale.x import module`
    return {m for m in found if m in known and m != name}


def package_of(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANK) else None


GRAPH = {name: imported(path, name, set(modules())) for name, path in modules().items()}


def test_every_package_has_a_layer():
    packages = {package_of(name) for name in GRAPH} - {None}
    assert packages <= set(RANK), f"packages without a layer: {sorted(packages - set(RANK))}"
    loose = [name for name in GRAPH if package_of(name) is None and name != "whale"]
    assert not loose, f"modules at whale/ outside any package: {loose}"


def test_no_import_reaches_a_higher_layer_or_a_peer():
    wrong = []
    for name, deps in GRAPH.items():
        mine = package_of(name)
        if mine is None:  # whale/__init__.py: the public facade (load_agent), above everything
            continue
        for dep in deps:
            theirs = package_of(dep)
            if theirs is not None and theirs != mine and RANK[theirs] >= RANK[mine]:
                wrong.append(f"{name} -> {dep}")
    assert not wrong, "imports against the layering rule:\n" + "\n".join(sorted(wrong))


def test_no_import_circle():
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[str] = []

    def visit(name: str, path: list[str]) -> None:
        seen[name] = 1
        for dep in sorted(GRAPH[name]):
            if seen.get(dep) == 1:
                cycles.append(" -> ".join([*path[path.index(dep) :], dep]))
            elif dep not in seen:
                visit(dep, [*path, dep])
        seen[name] = 2

    for name in sorted(GRAPH):
        if name not in seen:
            visit(name, [name])
    assert not cycles, "import circles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_fits_in_a_head(name):
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name}: {lines} lines (at most {MAX_LINES})"


def test_no_two_modules_share_a_name():
    """A file name says which module it is: `step.py` in two packages reads as one idea in two places."""
    seen: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(name)
    assert {base: names for base, names in seen.items() if len(names) > 1} == {}


def test_the_rule_catches_a_violation(tmp_path):
    """The reader itself: a relative import from a lower package up to a higher one is found."""
    fake = WHALE / "model" / "engine.py"
    deps = imported(fake, "whale.model.engine", set(GRAPH))
    assert all(package_of(d) in ("model", "core") for d in deps)
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..run import schedule\n    from whale.cli.main import main\n")
    names = {"whale.run", "whale.run.schedule", "whale.cli.main"}
    assert imported(probe, "whale.model.probe", names) == {
        "whale.run",
        "whale.run.schedule",
        "whale.cli.main",
    }
