"""Offline mutation proposer: no LLM, it edits a harness's declared knobs and crosses over good parents.

Knobs are module-level UPPER_CASE constants bound to a plain literal (bool, int, float, str). Mutation
flips booleans, nudges numbers, and swaps strings for values from the domain's pool; crossover takes each
knob from one of two frontier parents. `text_only` (Fast-Slow's fast loop) restricts both to prompt
strings. The output is always a complete harness file: only the literal's
source span changes, everything else stays byte-for-byte.

A knob that the harness cannot read in its current configuration (the few-shot example while `FEW_SHOT`
is off) is drawn rarely: editing it changes nothing the model sees, so the candidate would only tie.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from typing import Any

from whale.harness.parsing import parse_untrusted
from whale.harness.records import HarnessCandidate
from whale.search.proposer import Proposal, ProposalRequest

Knob = bool | int | float | str
MECHANISM_WEIGHT = 3.0  # Meta-Harness's lesson: change a mechanism before rewording a prompt
DEAD_WEIGHT = 0.1  # a knob the current configuration does not read: still reachable, seldom drawn


@dataclass(frozen=True)
class KnobSite:
    name: str
    value: Knob
    start: int  # character offsets of the literal in the source
    end: int


def find_knobs(source: str) -> dict[str, KnobSite]:
    tree = parse_untrusted(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    sites: dict[str, KnobSite] = {}
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        ):
            continue
        name = node.targets[0].id
        value = node.value
        if not name.isupper() or not isinstance(value, ast.Constant):
            continue
        if not isinstance(value.value, (bool, int, float, str)):
            continue
        start = offsets[value.lineno - 1] + _char_col(lines[value.lineno - 1], value.col_offset)
        end = offsets[value.end_lineno - 1] + _char_col(lines[value.end_lineno - 1], value.end_col_offset)
        sites[name] = KnobSite(name, value.value, start, end)
    return sites


def live_knobs(source: str) -> set[str]:
    """Knobs the harness reads in its current configuration: every load of the name except in a branch
    that a bool knob's value rules out (`if FLAG:`, `if not FLAG:`, `a if FLAG else b`). Static and
    conservative: a load after an early return still counts as live."""
    values = {n: s.value for n, s in find_knobs(source).items()}
    live: set[str] = set()

    def condition(test: ast.expr) -> bool | None:
        if isinstance(test, ast.Name) and isinstance(values.get(test.id), bool):
            return bool(values[test.id])
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = condition(test.operand)
            return None if inner is None else not inner
        return None

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.If, ast.IfExp)):
            taken = condition(node.test)
            visit(node.test)
            body = node.body if isinstance(node.body, list) else [node.body]
            orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
            for child in (body if taken is not False else []) + (orelse if taken is not True else []):
                visit(child)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in values:
            live.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(parse_untrusted(source))
    return live


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode()[:byte_col].decode())


def set_knobs(source: str, values: dict[str, Knob]) -> str:
    """Rewrite the literals of the named knobs; unknown names are an error."""
    sites = find_knobs(source)
    unknown = set(values) - set(sites)
    if unknown:
        raise KeyError(f"not knobs of this harness: {sorted(unknown)}")
    for site in sorted((sites[n] for n in values), key=lambda s: -s.start):
        source = source[: site.start] + repr(values[site.name]) + source[site.end :]
    return source


def mutate_value(value: Knob, pool: list[Any], rng: random.Random) -> Knob:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        if value >= 8:  # sizes such as token caps move by factors; +-1 would be a no-op in disguise
            options = {value // 2, value * 3 // 2, value * 2}
        else:
            options = {value + 1, value - 1, value * 2}
        floor = 1 if value >= 1 else 0
        return rng.choice(sorted(v for v in options if v >= floor and v != value and v <= max(2 * value, 8)))
    if isinstance(value, float):
        return round(value * rng.choice([0.5, 0.75, 1.25, 1.5]), 6)
    choices = [p for p in pool if p != value]
    return rng.choice(choices) if choices else value


def signature(source: str) -> tuple:
    return tuple(sorted((n, s.value) for n, s in find_knobs(source).items()))


class MutationProposer:
    name = "mutation"

    def __init__(
        self, pool: dict[str, list[Any]], seed: int = 0, crossover_rate: float = 0.3, text_only: bool = False
    ):
        self.pool = pool
        self.rng = random.Random(seed)
        self.crossover_rate = crossover_rate
        self.text_only = text_only

    def propose(self, request: ProposalRequest) -> Proposal:
        out = self.mutants(request.parents, request.seen, request.n, request.next_id)
        short = "" if len(out) == request.n else " (knob space nearly exhausted)"
        return Proposal(out, f"{len(out)} knob mutants{short}")

    def mutants(
        self, parents: list[HarnessCandidate], seen: set[tuple], n: int, next_id: Any
    ) -> list[HarnessCandidate]:
        """Up to n new candidates whose knob settings differ from every `seen` signature and each other.

        `parents[0]` is the incumbent; the rest are frontier members. `next_id()` names a new candidate.
        """
        out: list[HarnessCandidate] = []
        seen = set(seen)
        for _ in range(50 * n):
            if len(out) == n:
                break
            if len(parents) >= 2 and self.rng.random() < self.crossover_rate:
                a, b = self.rng.sample(parents, 2)
                source, hypothesis = self._crossover(a, b)
                parent = a.id
            else:
                base = parents[0] if self.rng.random() < 0.7 else self.rng.choice(parents)
                source, hypothesis = self._mutate(base)
                parent = base.id
            sig = signature(source)
            if source and sig not in seen:
                seen.add(sig)
                out.append(HarnessCandidate(next_id(), source, parent, hypothesis, self.name))
        return out

    def _mutate(self, base: HarnessCandidate) -> tuple[str, str]:
        """Change one or two knobs; mechanism switches (bools, counts) are drawn more often than wording."""
        sites = find_knobs(base.source)
        mutable = [
            s
            for s in sites.values()
            if (isinstance(s.value, str) and len(self.pool.get(s.name, [])) > 1)
            or (not isinstance(s.value, str) and not self.text_only)
        ]
        if not mutable:
            return "", ""
        live = live_knobs(base.source)
        weights = [
            (MECHANISM_WEIGHT if not isinstance(s.value, str) else 1.0)
            * (1.0 if s.name in live else DEAD_WEIGHT)
            for s in mutable
        ]
        chosen: list[KnobSite] = []
        for _ in range(self.rng.choice([1, 1, 2])):
            site = self.rng.choices(mutable, weights)[0]
            if site not in chosen:
                chosen.append(site)
        values = {s.name: mutate_value(s.value, self.pool.get(s.name, []), self.rng) for s in chosen}
        changes = ", ".join(f"{k}: {_short(sites[k].value)} -> {_short(v)}" for k, v in values.items())
        return set_knobs(base.source, values), f"mutate {changes}"

    def _crossover(self, a: HarnessCandidate, b: HarnessCandidate) -> tuple[str, str]:
        ka, kb = find_knobs(a.source), find_knobs(b.source)
        values = {
            n: (kb[n].value if self.rng.random() < 0.5 else s.value)
            for n, s in ka.items()
            if n in kb and (isinstance(s.value, str) or not self.text_only)
        }
        return set_knobs(a.source, values), f"crossover of {a.id} and {b.id}"


def _short(v: Knob) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "...'"
