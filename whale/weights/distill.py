"""Distill targets built from the rescued answer and checked by replaying the incumbent harness.

`rescue=distill` (P2O's context distillation) trains the incumbent's answering call, its last trainable
one, to give the answer a rescue harness found. The rescue's own reply is often not one the incumbent could
read that answer from: a tool computed it, or the rescue harness snapped the reply onto an option. So a
target is looked for in this order, each tried by a replay: the incumbent's first rollout of the task run
again in the sandbox, with every model reply scripted (the recorded ones, and the target on every call of
the answering prompt). In a harness of several calls, the answering prompt may hold the model's own
earlier replies; the replay gives them back as they were, so it decides there too.

    reply             the rescue's last credited reply, as it was sampled
    answer in place   the incumbent's own reply with its answer replaced by the rescued one
    answer            the rescued answer alone

The first target under which the incumbent's own code returns an answer that passes the verifier becomes
the example: the answering call's prompt ids, then the target's ids (the sampled ones for `reply`, the
tokenizer's with the end-of-reply token otherwise). A replay samples nothing, so it is not charged to the
budget; replays are counted. Skips, by reason:

    no call           the incumbent's rollout made no trainable model call
    no target         no target made the incumbent's harness return a passing answer
    too long          the targets that did are longer than the answering call's max_tokens
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from whale.harness.calls import RolloutJob, conversation_key
from whale.harness.records import HarnessCandidate, ModelCall, Rollout
from whale.harness.task import Task
from whale.model.trainer import TrainExample
from whale.rollout.executor import Executor
from whale.weights.examples import passed, trainable

Encode = Callable[[str], list[int]]  # a reply's text -> its token ids, ending with the end-of-reply token


@dataclass
class Distilled:
    """What distill made of one step's rescue rollouts."""

    pairs: list[tuple[Rollout, TrainExample]] = field(default_factory=list)  # rescue rollout, example
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> passing rescue rollouts unused
    targets: Counter[str] = field(default_factory=Counter)  # kind -> examples built from it
    replays: int = 0


def answering_call(rollout: Rollout) -> ModelCall | str:
    """The incumbent's answering call (its last trainable one, unless the harness said it did not produce
    the answer), or why there is none to distill into."""
    calls = [c for c in rollout.calls if (c.train if c.credit is None else c.credit) and c.completion_ids]
    return calls[-1] if calls else "no call"


def targets(incumbent: Rollout, call: ModelCall, rescued: Rollout) -> list[tuple[str, str]]:
    """(kind, text) of each target worth a replay, in the order they are preferred, without repeats."""
    answer, theirs = rescued.answer or "", incumbent.answer or ""
    credited = trainable(rescued)
    found = [
        ("reply", credited[-1].text if credited else ""),
        ("answer in place", call.text.replace(theirs, answer) if theirs and theirs in call.text else ""),
        ("answer", answer),
    ]
    out: list[tuple[str, str]] = []
    for kind, text in found:
        if text.strip() and text not in [t for _, t in out]:
            out.append((kind, text))
    return out


def replay_job(
    task: Task, harness: HarnessCandidate, incumbent: Rollout, call: ModelCall, text: str
) -> RolloutJob:
    """The incumbent's rollout run again with the model's replies scripted: what it was told before, and
    `text` on every call of the answering conversation."""
    script: dict[str, tuple[str, ...]] = {}
    for c in incumbent.calls:
        key = conversation_key(c.messages)
        script[key] = (*script.get(key, ()), c.text)
    script[conversation_key(call.messages)] = (text,)
    return RolloutJob(task, harness, incumbent.sample, salt="replay", script=script)


def target_ids(kind: str, text: str, rescued: Rollout, encode: Encode | None) -> list[int] | None:
    """The target's ids: as sampled for the rescue's reply, else the tokenizer's (None without one)."""
    if kind == "reply":
        return trainable(rescued)[-1].completion_ids
    return encode(text) if encode is not None else None


def distill(
    runner: Executor,
    incumbent: list[Rollout],
    rescue: list[Rollout],
    harnesses: dict[str, HarnessCandidate],
    tasks: dict[str, Task],
    threshold: float,
    max_per_task: int,
    encode: Encode | None,
) -> Distilled:
    """Up to `max_per_task` examples per rescued task, each from the first target a replay confirms."""
    first: dict[str, Rollout] = {}
    for r in incumbent:
        first.setdefault(r.task_id, r)
    out, plans = Distilled(), []
    for r in rescue:
        if not passed(r, threshold):
            continue
        call = answering_call(first[r.task_id])
        if isinstance(call, str):
            out.skipped[call] += 1
        else:
            plans.append((r, call, targets(first[r.task_id], call, r)))
    # One replay per distinct (task, target): rescues of one task often share their answer.
    calls = {r.task_id: call for r, call, _ in plans}
    wanted = list(dict.fromkeys((r.task_id, text) for r, _, found in plans for _, text in found))
    jobs = [
        replay_job(tasks[task], harnesses[first[task].harness_id], first[task], calls[task], text)
        for task, text in wanted
    ]
    replayed = runner.run(jobs) if jobs else []
    out.replays = len(replayed)
    works = {key for key, rollout in zip(wanted, replayed, strict=True) if passed(rollout, threshold)}
    per_task: Counter[str] = Counter()
    for r, call, found in plans:
        if per_task[r.task_id] >= max_per_task:
            continue
        reason = "no target"
        for kind, text in found:
            ids = target_ids(kind, text, r, encode) if (r.task_id, text) in works else None
            if ids is None:
                continue
            if len(ids) > int(call.params.get("max_tokens") or len(ids)):
                reason = "too long"
                continue
            per_task[r.task_id] += 1
            out.targets[kind] += 1
            mask = [0] * len(call.prompt_ids) + [1] * len(ids)
            out.pairs.append((r, TrainExample(call.prompt_ids + ids, mask)))
            break
        else:
            out.skipped[reason] += 1
    return out
