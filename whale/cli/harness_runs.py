"""Running one harness file on a domain split: shared by `whale eval` and `whale harness check`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale.cli.app import console, user_error

if TYPE_CHECKING:
    from whale.core.config import Config
    from whale.harness.records import Rollout


def domain_overrides(name: str, file: Path | None) -> list[str]:
    """Config overrides selecting a built-in domain, or a user's domain file (whose stem names it)."""
    if file is None:
        return [f"domain={name}"]
    return [f"domain={file.stem}", f"domain.file={file}"]


def run_harness(
    cfg: Config, name: str, source: str, split: str, k: int, label: str, limit: int | None = None
) -> tuple[list, list]:
    """Build domain, model and runner from `cfg`; run k rollouts of the harness on each task of `split`."""
    tasks, rollouts = run_harnesses(cfg, {name: source}, split, k, label, limit)
    return tasks, rollouts[name]


def run_harnesses(
    cfg: Config,
    sources: dict[str, str],
    split: str,
    k: int,
    label: str,
    limit: int | None = None,
    loaded: tuple[Any, Any] | None = None,
) -> tuple[list, dict[str, list]]:
    """Every harness of `sources` (name -> code), k rollouts on each task of `split`, under one model and
    runner: sample s of a task draws the same per-call seeds for each, so their differences are paired.
    `loaded` is a (model, tokenizer) already in memory, for callers that score many domains."""
    from whale.core.progress import track
    from whale.domains.registry import build_domain
    from whale.harness.calls import RolloutJob
    from whale.harness.records import HarnessCandidate
    from whale.model.loading import load_model
    from whale.rollout.build import build_executor

    dom = build_domain(cfg.domain)
    splits = dom.splits()
    if split not in splits:
        raise user_error(f"--split {split}: expected one of {', '.join(splits)}")
    tasks = splits[split][:limit]
    model, tokenizer = loaded or load_model(cfg.model.name, cfg.seed)
    runner = build_executor(cfg, model, tokenizer, dom, weights=None)
    rollouts = {}
    try:
        with track(console, label, len(sources) * len(tasks) * k) as tick:
            for name, source in sources.items():
                candidate = HarnessCandidate(name, source)
                jobs = [RolloutJob(t, candidate, s) for t in tasks for s in range(k)]
                rollouts[name] = runner.run(jobs, tick)
    finally:
        runner.close()
    return tasks, rollouts


def harness_source(path: Path) -> str:
    if not path.is_file():
        raise user_error(f"harness file not found: {path}")
    return path.read_text()


def trace_lines(rollout: Rollout, width: int = 400) -> list[str]:
    """A rollout as a person reads it: each model call's last message and reply, each tool call and
    what it returned, then the answer and its verdict."""

    def cut(text: Any) -> str:
        text = " ".join(str(text).split())
        return text if len(text) <= width else text[:width] + "..."

    verdict = f"error {rollout.error}" if rollout.error else f"reward {rollout.reward}"
    out = [f"{rollout.task_id} sample {rollout.sample} ({rollout.harness_id}): {verdict}"]
    for i, call in enumerate(rollout.calls):
        last = call.messages[-1] if call.messages else {}
        out.append(f"  model call {i}: {last.get('role', '?')}: {cut(last.get('content', ''))}")
        out.append(f"    reply: {cut(call.text)}")
    for call in rollout.tool_calls:
        args = ", ".join([*map(repr, call.args), *(f"{k}={v!r}" for k, v in call.kwargs.items())])
        result = f"error {call.error}" if call.error else cut(call.result)
        out.append(f"  tool {call.name}({cut(args)}) -> {result}")
    out.append(f"  answer: {cut(rollout.answer)}")
    return out
