"""One run: build every part from a Config, then spend the budget one unit at a time.

A unit is a weight step (whale.weights.weight_step) or a harness-search step (whale.search.search_step); the
schedule (whale.run.schedule) says which comes next. Every method spends the same budget and is evaluated at
the same budget fractions: the last unit is cut to what the budget can pay for, and an evaluation point every
`eval.every_rollouts` rollouts scores the agent held when that many had been spent (a unit changes the agent
only when it ends). After every unit the run commits: weights to a checkpoint folder if they changed, then
state.json (whale.run.rundir). A killed run resumes from its last commit.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from whale.core.config import Config, ConfigError
from whale.core.progress import track
from whale.core.timing import restart as restart_timing
from whale.domains.registry import build_domain
from whale.harness.records import HarnessCandidate, Rollout
from whale.model.distributed import build_trainer
from whale.model.sampling import reply_encoder
from whale.rollout.build import build_executor
from whale.run import events
from whale.run.budget import Budget
from whale.run.cross_eval import cross_evaluator
from whale.run.disk import retained_checkpoints, save_checkpoint
from whale.run.evaluation import (
    copied_point,
    eval_line,
    evaluate,
    journals,
    points_between,
    start_eval_source,
)
from whale.run.preflight import as_started, check_config, resolve_engine, seed_candidate
from whale.run.proposing import build_proposer, proposer_spent, record_proposal, search_brief
from whale.run.rescue_pool import rescue_pool
from whale.run.rundir import EVALS, EVENTS, SEARCH, TRAIN, RunDir, RunState
from whale.run.schedule import (
    HARNESS,
    WEIGHTS,
    ScheduleState,
    SinglePhase,
    UnitReport,
    build_schedule,
    measured_gains,
    method_rules,
)
from whale.run.summary import summarize_run
from whale.run.tracking import Tracker
from whale.search.archive import Archive, CandidateEval
from whale.search.proposer import ProposerUsage
from whale.search.scoring import evaluate_candidate
from whale.search.search_step import SearchSettings, harness_step, population_step
from whale.weights.weight_step import WeightSettings, needs_reference, step_line, weight_step


@dataclass(frozen=True)
class UnitDone:
    value: float  # the schedule's signal (UnitReport.value)
    improved: bool = False
    samples: int = 0
    cut: bool = False  # the budget ended inside the unit: the run stops after it
    before: float | None = None  # a search unit: the incumbent's score before it (whale-gain's baseline)


class Experiment:
    def __init__(
        self,
        cfg: Config,
        out: Path,
        console: Console | None = None,
        resume: bool = False,
        start_eval_from: list[Path] = (),
    ):
        self.cfg, self.out, self.dir = cfg, out, RunDir(out)
        self.start_eval_from = list(start_eval_from)  # sibling runs that may lend their point 0
        self.console = console or Console()
        self.bars = partial(track, self.console)
        if resume and self.dir.is_run():
            self.dir.claim()  # first of all: two processes must never work on one run
            self.cfg = cfg = as_started(cfg, self.dir.started_config())
        check_config(cfg)
        self.rules = method_rules(cfg.schedule.method)
        self.domain = build_domain(cfg.domain)
        self.splits = self.domain.splits()
        seed = None if resume else seed_candidate(cfg, self.domain)
        train_tasks = len(self.splits["train"])
        self.schedule = build_schedule(cfg.schedule, train_tasks, cfg.rft.tasks_per_step, cfg.seed)
        self.trainer, tokenizer = build_trainer(cfg)
        self.resolved, self.engine_summary = resolve_engine(cfg, self.trainer, tokenizer)
        self.runner = build_executor(self.resolved, self.trainer.model, tokenizer, self.domain, self.trainer)
        if resume and not self.dir.is_run():
            raise ConfigError(f"--resume {out}: no state.json there (not a whale run, or it never started)")
        if not resume:
            self.dir.create(cfg)  # only now: a config, domain or model error leaves nothing on disk
        self.archive = Archive(self.dir / SEARCH)
        parts = {"trainer": self.trainer, "runner": self.runner, "archive": self.archive, "run": self.dir}
        self.cross = cross_evaluator(cfg.eval, self.splits, self.bars, resume, **parts)  # before a load
        self.weight_settings = WeightSettings.from_config(cfg, reply_encoder(tokenizer))
        brief = search_brief(cfg, self.domain)
        self.search_settings = SearchSettings.from_config(cfg, brief, self.rules.prompts_only)
        self.state = self._load_state() if resume else self._fresh_state(seed)
        self.usage = ProposerUsage(**(self.state.proposer_usage or {}))
        if self.state.proposer_spent:
            self.schedule = SinglePhase(WEIGHTS)
        self.tracker = Tracker(cfg.tracking, out, cfg.model_dump())
        self.session_start = time.monotonic()
        restart_timing(self.state.budget.get("parts_s", {}))  # the time per part of earlier sessions
        self.wall_before = self.state.budget["wall_s"]

    def run(self) -> dict[str, Any]:
        st = self.state
        if st.eval_points == 0:
            source = self.start_eval_source()
            if source is None:
                self._evaluate("start")
            else:
                self._copy_eval(RunDir(source), 0, "start", reused_from=str(source))
            self._commit(weights_changed=False, boundary=True)
        if self.runner.sandbox_problems and not st.finished:
            self._event(events.SandboxWarning(self.runner.sandbox_problems))
        while not st.finished and not self.budget.exhausted:
            sched = ScheduleState(**st.schedule)
            if sched.kind == HARNESS and (st.proposer_spent or proposer_spent(st, self.cfg, self.usage)):
                if not self._stop_searching(sched):
                    break
                continue
            held, served = st.incumbent, self.runner.weights_version
            if sched.kind == WEIGHTS:
                unit = self._weight_unit(sched)
            elif self.rules.population:
                unit = self._population_unit()
            else:
                unit = self._search_unit()
            if unit is None:  # the budget left cannot pay for the next step of this unit
                break
            st.unit += 1
            b = self.budget
            report = UnitReport(
                sched.kind, unit.value, unit.improved, b.rollouts, b.limit_rollouts, unit.samples,
                unit.before, st.measured,
            )  # fmt: skip
            decision = self.schedule.advance(sched, report)
            st.schedule = decision.state.to_json()
            if decision.switched:
                length = sched.done_in_phase + 1
                switch = events.PhaseSwitch(
                    sched.kind, decision.state.kind, sched.phase, length, decision.reason, decision.signals
                )
                self._event(switch)
                after = f"after {length} units: {decision.reason}"
                self.console.print(f"  phase switch {sched.kind} -> {decision.state.kind} {after}")
            trained = self.runner.weights_version != served
            crossed = self._evaluate_crossed(held, trained)
            self._commit(trained, boundary=decision.switched or crossed or unit.cut)
            if unit.cut:
                break
        if not st.finished:
            left = self.budget.left
            self._evaluate("end", at=self.budget.limit_rollouts)
            self._finish("budget spent" + (f" ({left} rollouts left fit no unit)" if left else ""))
        self.runner.close()
        self.trainer.close()
        self.tracker.close()
        self.dir.release()
        return summarize_run(self.out)

    def _weight_unit(self, sched: ScheduleState) -> UnitDone | None:
        """One weight step under the incumbent (fast-slow: a member per task), cut to the tasks the budget
        pays for (None: not one)."""
        st, algorithm, settings = self.state, self.cfg.weights.algorithm, self.weight_settings
        tasks = min(settings.tasks_per_step, self.budget.left // settings.k)
        if tasks == 0:
            return None
        if sched.done_in_phase == 0 and needs_reference(self.cfg.weights):  # the phase's reference (DPO, KL)
            self.trainer.freeze_reference()
            st.reference_checkpoint = st.checkpoint
            st.kept_checkpoints = sorted(set(st.kept_checkpoints or []) | {st.checkpoint} - {None})
        members = [e["candidate_id"] for e in st.population or []] or [st.incumbent]  # the incumbent first
        served, harnesses = self.runner.weights_version, [self.archive.load(cid) for cid in members]
        rng = random.Random(self.cfg.seed * 1_000_003 + st.weight_steps)
        label = f"{algorithm.upper()} step {st.weight_steps + 1}"
        pool = rescue_pool(self.cfg, self.domain, self.archive, members, self.splits["search"][0], served)
        result = weight_step(  # the points the step passes are taken, on today's agent, before it trains
            self.runner, self.trainer, harnesses, self.splits["train"],
            replace(settings, tasks_per_step=tasks), rng, f"rft{st.weight_steps}", self.bars, label,
            pool, self.budget.left, lambda n: self._evaluate_passed(self.budget.rollouts + n),
        )  # fmt: skip
        st.weight_steps += 1
        if result.optimizer_steps:  # else nothing was kept: the same weights, label and search scores
            st.weights_version = f"w{st.weight_steps}"
            self.runner.sync_weights(st.weights_version, self.trainer)
            st.incumbent_eval = None
        self.dir.append(TRAIN, [r.to_json() for r in result.rollouts])
        self._charge(result.rollouts, "train")
        served = self.runner.weights_version
        self._event(events.weight_step_event(result, st.weight_steps, sched.phase, algorithm, served))
        self.console.print(f"  weight step {st.weight_steps} ({algorithm}): {step_line(result, served)}")
        return UnitDone(result.train_reward, samples=len(result.rollouts))

    def _search_unit(self) -> UnitDone | None:
        """One search iteration: the incumbent's score, whether it changed (None: no budget to re-score)."""
        st, tasks = self.state, self.splits["search"]
        incumbent = self.archive.load(st.incumbent)
        ev = self._current_eval(st.incumbent, st.incumbent_eval)
        if ev is None:
            return None
        proposer = build_proposer(self.cfg, self.domain, self.usage, st.search_iters, self.console, tasks[0])
        seed = self.cfg.seed + st.search_iters
        with self.bars(
            f"search iteration {st.search_iters + 1}", self.search_settings.rollouts(len(tasks))
        ) as tick:
            result = harness_step(
                self.runner, self.archive, proposer, incumbent, ev, tasks, self.search_settings, seed, tick,
                self.budget.left,
            )  # fmt: skip
        st.search_iters += 1
        self._charge(result.rollouts, "search")
        record_proposal(self.state, self.cfg, self.usage, result.proposal, len(result.rollouts))
        st.incumbent, st.incumbent_eval = result.incumbent.id, asdict(result.incumbent_eval)
        score = result.incumbent_eval.mean
        self._event(events.search_event(result, st.search_iters, st.incumbent, score, result.accepted))
        verdict = "accepted" if result.accepted else "kept incumbent"
        self.console.print(f"  search iteration {st.search_iters}: {verdict} — {result.reason}")
        return UnitDone(score, result.accepted, cut=result.cut, before=ev.mean)

    def _population_unit(self) -> UnitDone | None:
        """fast-slow: re-score the population under the current weights and add prompt-text children; the
        acceptance rule decides whether one becomes the leader, the harness used at evaluation."""
        st, tasks = self.state, self.splits["search"]
        known = {e["candidate_id"]: e for e in st.population or []}
        scored = [self._current_eval(cid, known.get(cid)) for cid in known or [st.incumbent]]
        population = [ev for ev in scored if ev is not None]
        if len(population) < len(scored):
            return None
        proposer = build_proposer(self.cfg, self.domain, self.usage, st.search_iters, self.console, tasks[0])
        total = self.search_settings.rollouts(len(tasks))
        with self.bars(f"population iteration {st.search_iters + 1}", total) as tick:
            result = population_step(
                self.runner, self.archive, proposer, population, tasks, self.search_settings, st.search_iters,
                tick, self.budget.left,
            )  # fmt: skip
        st.search_iters += 1
        self._charge(result.rollouts, "search")
        record_proposal(self.state, self.cfg, self.usage, result.proposal, len(result.rollouts))
        best = result.population[0]
        changed = best.candidate_id != st.incumbent
        st.population = [asdict(e) for e in result.population]
        st.incumbent, st.incumbent_eval = best.candidate_id, asdict(best)
        members = {e.candidate_id: e.mean for e in result.population}
        self._event(events.search_event(result, st.search_iters, st.incumbent, best.mean, changed, members))
        shown = ", ".join(f"{e.candidate_id} {e.mean:.3f}" for e in result.population)
        self.console.print(f"  population iteration {st.search_iters}: {shown}")
        return UnitDone(best.mean, changed, cut=result.cut)

    def _current_eval(self, candidate_id: str, known: dict[str, Any] | None) -> CandidateEval | None:
        """The candidate's search score under today's weights, re-scored if stale (None: no budget)."""
        ev = CandidateEval(**known) if known else None
        if ev is not None and ev.weights_version == self.runner.weights_version:
            return ev
        tasks, n = self.splits["search"], self.cfg.search.rollouts_per_task
        if len(tasks) * n > self.budget.left:
            return None
        with self.bars(f"re-evaluating {candidate_id}", len(tasks) * n) as tick:
            ev, spent = evaluate_candidate(
                self.runner, self.archive, self.archive.load(candidate_id), tasks, n, tick
            )
        self._charge(spent, "search")
        self._event(events.Reeval(candidate_id, ev.mean, len(spent)))
        return ev

    def _stop_searching(self, sched: ScheduleState) -> bool:
        """The proposer's budget is spent: weight steps take the rest of the budget, or, for harness-only,
        the run ends early and says why. Returns whether the run goes on."""
        reason = self.state.proposer_spent
        self.console.print(f"  {reason}: no more harness search")
        if self.rules.ends_with_proposer:
            self._evaluate("end")
            self._finish(f"stopped early, {reason}")
            return False
        self.schedule = SinglePhase(WEIGHTS)
        self.state.schedule = ScheduleState(WEIGHTS, sched.phase + 1).to_json()
        self._event(events.PhaseSwitch(HARNESS, WEIGHTS, sched.phase, sched.done_in_phase, reason, {}))
        self._commit(weights_changed=False, boundary=True)
        return True

    def _evaluate_passed(self, end: int) -> None:
        """Before a unit spending up to `end` rollouts: the points it passes (not one it ends on) now."""
        st, every = self.state, self.cfg.eval.every_rollouts
        due = points_between(st.next_eval_at, every, end, self.budget.limit_rollouts, inclusive=False)
        for at in due:
            self._evaluate(f"{at} rollouts", at=at)
            st.next_eval_at = at + every
        if due:
            self._commit(weights_changed=False, boundary=True)

    def _evaluate_crossed(self, held: str, trained: bool) -> bool:
        """After a unit: the points it reached. A unit changes the agent when it ends, so a point it ended
        past scores the harness `held` before it: every method is evaluated at the same budget fractions."""
        st, b, every = self.state, self.budget, self.cfg.eval.every_rollouts
        due = points_between(st.next_eval_at, every, b.rollouts, b.limit_rollouts, inclusive=True)
        for at in due:
            harness = st.incumbent if at == b.rollouts else held
            self._evaluate(f"{at} rollouts", weights_pending=trained, harness=harness, at=at)
            st.next_eval_at = at + every
        return bool(due)

    def _evaluate(
        self, label: str, weights_pending: bool = False, harness: str | None = None, at: int | None = None
    ) -> None:
        """Score the incumbent (or `harness`) on val and test, standing for `at` rollouts. The record names
        the checkpoint holding the weights (None: the base model; `weights_pending`: saved when this unit
        commits), so `whale export` can rebuild every point. A point whose weights and harness equal the
        last one's is copied from it (`repeats`): it would draw the same rollouts again."""
        st, k = self.state, self.cfg.eval.k
        harness_id = harness or st.incumbent
        last = self.dir.points()[-1] if st.eval_points else None
        if last and last["weights"] == self.runner.weights_version and last["harness"] == harness_id:
            self._copy_eval(self.dir, last["point"], label, at, repeats=last["point"])
            return
        checkpoint = self._checkpoint_name() if weights_pending else st.checkpoint
        record = self._point_record(label, checkpoint, harness_id)
        journal = journals(self.dir, st.eval_points, self.trainer.trainable_tensors())  # kept if killed
        scored = evaluate(self.runner, self.archive.load(harness_id), self.splits, k, self.bars, journal)
        for split, (rollouts, score) in scored.items():
            self.dir.write_eval_rows(st.eval_points, split, [r.to_json() for r in rollouts])
            self._charge(rollouts, "eval")
            record[split] = score
        self._add_point(record, at)
        self.console.print(eval_line(record, k))

    def _copy_eval(
        self, source: RunDir, point: int, label: str, at: int | None = None, **provenance: Any
    ) -> None:
        """Point `point` of run `source` as this run's next point, charged as a fresh evaluation."""
        st = self.state
        record, rows = copied_point(source, point)
        for split, split_rows in rows.items():
            self.dir.write_eval_rows(st.eval_points, split, split_rows)
            self._charge([Rollout.from_json(r) for r in split_rows], "eval")
        harness = record.get("harness") or st.incumbent  # a repeat stands for the agent it repeats
        record.update(self._point_record(label, st.checkpoint, harness), **provenance)
        self._add_point(record, at)
        same = f"point {point}" if source.path == self.out else f"point {point} of {source.path}"
        self.console.print(eval_line(record, self.cfg.eval.k, copied_from=same))

    def _point_record(self, label: str, checkpoint: str | None, harness: str) -> dict[str, Any]:
        phase = ScheduleState(**self.state.schedule).kind
        return {
            "point": self.state.eval_points, "label": label, "phase": phase,
            "weights": self.runner.weights_version, "checkpoint": checkpoint, "harness": harness,
        }  # fmt: skip

    def _add_point(self, record: dict[str, Any], at: int | None = None) -> None:
        """`rollouts` is the budget the point stands for; `spent` what had been spent when it was taken;
        `effects` each side's val effect since the last point (whale/run/cross_eval.py)."""
        if self.state.eval_points:
            self.cross.measure(self.dir.points()[-1], record, partial(self._charge, kind="eval"))
        self.cross.remember(record["weights"])
        b, st = self.budget, self.state
        st.measured = measured_gains(st.measured, record.get("effects"), b.train_rollouts, b.search_rollouts)
        record.update(events.point_stamp(b.rollouts if at is None else at, b.rollouts, b.wall_s))
        self.dir.append(EVALS, [record])
        self.tracker.log(record, record["rollouts"])
        st.eval_points += 1

    @property
    def budget(self) -> Budget:
        return Budget(**self.state.budget)

    def _charge(self, rollouts: list[Rollout], kind: str) -> None:
        b = self.budget
        b.charge(rollouts, kind)
        b.wall_s = self.wall_before + time.monotonic() - self.session_start
        self.state.budget = b.to_json()

    def _event(self, event: events.Event) -> None:
        b = self.budget
        record = event.stamped(self.state.unit, b.rollouts, b.wall_s)
        self.dir.append(EVENTS, [record])
        self.tracker.log(record, b.rollouts)

    def _checkpoint_name(self) -> str:
        """The folder the weights of the current unit go to when it commits."""
        return f"u{self.state.unit:05d}"

    def _fresh_state(self, seed: HarnessCandidate) -> RunState:
        self.archive.add(seed, status="seed")
        self.state = RunState(
            schedule=self.schedule.initial().to_json(),
            budget=Budget(self.cfg.schedule.budget_rollouts).to_json(),
            next_eval_at=self.cfg.eval.every_rollouts,
        )
        self.state.stamp()
        compute = {"engine": self.engine_summary, "trainer": self.trainer.config.dtype}
        self.console.print(f"compute: engine {compute['engine']}; trainer {compute['trainer']}")
        self.dir.append(EVENTS, [events.Start(self.resolved.model_dump(), compute).to_json()])
        self._commit(weights_changed=False, boundary=False)
        return self.state

    def _load_state(self) -> RunState:
        state = self.dir.load_state()
        self.archive.forget_after(state.candidates or [])
        self.dir.keep_checkpoints(set(state.kept_checkpoints or []) | {state.checkpoint})
        if needs_reference(self.cfg.weights) and state.reference_checkpoint:
            self.trainer.load_reference(self.dir.checkpoint(state.reference_checkpoint))
        elif needs_reference(self.cfg.weights):
            self.trainer.freeze_reference()  # the initial weights, before a checkpoint replaces them
        if state.checkpoint:
            self.trainer.load(self.dir.checkpoint(state.checkpoint))
        self.runner.sync_weights(state.weights_version, self.trainer)
        self.runner.engine_calls = state.engine_calls
        state.stamp()
        self.dir.append(EVENTS, [events.Resume(state.unit).to_json()])
        return state

    def _commit(self, weights_changed: bool, boundary: bool) -> None:
        """Persist weights (if changed) then state.json; state.json is the single commit point. Checkpoint
        folders neither kept (boundaries, thinned by `checkpoints.keep_every`) nor the latest go after it."""
        st = self.state
        if weights_changed:
            st.checkpoint = self._checkpoint_name()
            st.checkpoint_bytes += save_checkpoint(self.trainer, self.dir, st.checkpoint)
        if boundary and st.checkpoint:
            st.kept_checkpoints = sorted(set(st.kept_checkpoints or []) | {st.checkpoint})
        keep = self.cfg.checkpoints
        if keep.keep_every > 1 and st.kept_checkpoints:
            retained = retained_checkpoints(self.dir.points(), keep.keep_every, keep.keep_best)
            st.kept_checkpoints = sorted(set(st.kept_checkpoints) & retained)
        st.engine_calls = self.runner.engine_calls
        self.dir.commit(st, self.archive.ids())
        live = set(st.kept_checkpoints or []) | {st.checkpoint, st.reference_checkpoint}
        self.dir.keep_checkpoints(live, "u")

    def _finish(self, reason: str) -> None:
        self.state.finished = True
        self._event(events.End(reason))
        self._commit(weights_changed=False, boundary=True)  # keeps the end point's checkpoint

    def start_eval_source(self) -> Path | None:
        seed = self.archive.load("c0000").source
        return start_eval_source(self.cfg, self.out, seed, self.start_eval_from)
