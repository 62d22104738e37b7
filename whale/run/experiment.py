"""One run: build every part from a Config, then spend the budget one unit at a time.

A unit is a weight step (whale.weights.step) or a harness-search step (whale.search.step); the schedule
(whale.run.schedule) says which comes next. After every unit, evaluation points fall due every
`eval.every_rollouts` budget rollouts, and the unit commits: weights to a checkpoint folder if they
changed, then state.json (whale.run.rundir). A killed run resumes from its last commit.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from whale.core.config import Config, ConfigError
from whale.core.progress import track
from whale.core.provenance import with_version
from whale.domains.registry import build_domain
from whale.harness.records import HarnessCandidate, Rollout
from whale.model.distributed import build_trainer
from whale.model.loading import check_model_name
from whale.rollout.build import build_executor
from whale.run import events
from whale.run.budget import Budget
from whale.run.disk import folder_bytes, retained_checkpoints
from whale.run.evaluation import copied_point, eval_line, evaluate, start_eval_source
from whale.run.preflight import check_engine, check_proposer, resolve_engine_dtype, seed_candidate
from whale.run.proposing import build_proposer, proposer_spent, record_proposal, search_brief
from whale.run.rundir import EVALS, EVENTS, SEARCH, TRAIN, RunDir, RunState
from whale.run.schedule import (
    HARNESS,
    WEIGHTS,
    ScheduleState,
    SinglePhase,
    UnitReport,
    build_schedule,
    method_rules,
)
from whale.run.summary import summarize_run
from whale.run.tracking import Tracker, check_tracking
from whale.search.archive import Archive, CandidateEval
from whale.search.proposer import ProposerUsage
from whale.search.scoring import evaluate_candidate
from whale.search.step import SearchSettings, harness_step, population_step
from whale.weights.step import WeightSettings, needs_reference, weight_step


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
        check_model_name(cfg.model.name)
        check_engine(cfg)
        check_proposer(cfg)
        check_tracking(cfg.tracking)
        self.rules = method_rules(cfg.schedule.method)
        self.domain = build_domain(cfg.domain)
        self.splits = self.domain.splits()
        seed = None if resume else seed_candidate(cfg, self.domain)
        self.schedule = build_schedule(cfg.schedule, len(self.splits["train"]), cfg.rft.tasks_per_step)
        self.trainer, tokenizer = build_trainer(cfg)
        engine_cfg, self.engine_dtype = resolve_engine_dtype(cfg, self.trainer.model, tokenizer)
        self.runner = build_executor(engine_cfg, self.trainer.model, tokenizer, self.domain, self.trainer)
        if resume and not self.dir.is_run():
            raise ConfigError(f"--resume {out}: no state.json there (not a whale run, or it never started)")
        if not resume:
            self.dir.create(cfg)  # only now: a config, domain or model error leaves nothing on disk
        self.archive = Archive(self.dir / SEARCH)
        self.weight_settings = WeightSettings.from_config(cfg)
        self.search_settings = SearchSettings.from_config(cfg, search_brief(cfg, self.domain))
        self.state = self._load_state() if resume else self._fresh_state(seed)
        self.usage = ProposerUsage(**(self.state.proposer_usage or {}))
        if self.state.proposer_spent:
            self.schedule = SinglePhase(WEIGHTS)
        self.tracker = Tracker(cfg.tracking, out, cfg.model_dump())
        self.session_start = time.monotonic()
        self.wall_before = self.state.budget["wall_s"]

    def run(self) -> dict[str, Any]:
        st, every = self.state, self.cfg.eval.every_rollouts
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
            served = self.runner.weights_version
            samples, improved = 0, False
            if sched.kind == WEIGHTS:
                value, samples = self._weight_unit(sched)
            elif self.rules.population:
                value, improved = self._population_unit()
            else:
                value, improved = self._search_unit()
            st.unit += 1
            b = self.budget
            report = UnitReport(sched.kind, value, improved, b.rollouts, b.limit_rollouts, samples)
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
            due = b.rollouts >= st.next_eval_at or b.exhausted
            trained = self.runner.weights_version != served
            if due:
                self._evaluate("end" if b.exhausted else f"{b.rollouts} rollouts", weights_pending=trained)
                st.next_eval_at = (b.rollouts // every + 1) * every
            self._commit(trained, boundary=decision.switched or due)
        if not st.finished:
            self._finish("budget spent")
        self.runner.close()
        self.trainer.close()
        self.tracker.close()
        self.dir.release()
        return self.summary()

    def _weight_unit(self, sched: ScheduleState) -> tuple[float, int]:
        """One weight step under the incumbent (fast-slow: a population member drawn per task): its mean
        train reward and the rollouts behind it."""
        st, algorithm = self.state, self.cfg.weights.algorithm
        if sched.done_in_phase == 0 and needs_reference(
            self.cfg.weights
        ):  # phase start: the reference (DPO, KL)
            self.trainer.freeze_reference()
            st.reference_checkpoint = st.checkpoint
            if st.checkpoint:
                st.kept_checkpoints = sorted(set(st.kept_checkpoints or []) | {st.checkpoint})
        members = [e["candidate_id"] for e in st.population or []] or [st.incumbent]
        harnesses = [self.archive.load(cid) for cid in members]
        rng = random.Random(self.cfg.seed * 1_000_003 + st.weight_steps)
        label = f"{algorithm.upper()} step {st.weight_steps + 1}"
        result = weight_step(
            self.runner, self.trainer, harnesses, self.splits["train"], self.weight_settings, rng,
            f"rft{st.weight_steps}", self.bars, label,
        )  # fmt: skip
        st.weight_steps += 1
        if result.optimizer_steps:  # else nothing was kept: the same weights, label and search scores
            st.weights_version = f"w{st.weight_steps}"
            self.runner.sync_weights(st.weights_version, self.trainer)
            st.incumbent_eval = None
        self.dir.append(TRAIN, [r.to_json() for r in result.rollouts])
        self._charge(result.rollouts, "train")
        total = len(result.rollouts)
        self._event(
            events.WeightStep(
                st.weight_steps,
                sched.phase,
                algorithm,
                result.harnesses,
                result.train_reward,
                result.kept,
                total,
                result.kept / max(total, 1),
                result.examples,
                result.by_harness,
                result.dropped_tasks,
                result.loss,
                result.kl,
                result.margin,
                result.mean_abs_advantage,
                result.optimizer_steps,
                self.runner.weights_version,
            )  # fmt: skip
        )
        extra = "".join(
            f", {name} {value:.4f}"
            for name, value in (
                ("KL", result.kl),
                ("margin", result.margin),
                ("|A|", result.mean_abs_advantage),
            )
            if value is not None
        )
        trained = f"loss {result.loss:.3f}{extra}" if result.optimizer_steps else (
            f"no update: {self.runner.weights_version} stays"
        )  # fmt: skip
        self.console.print(
            f"  weight step {st.weight_steps} ({algorithm}): train reward {result.train_reward:.3f}, "
            f"kept {result.kept}/{total}, {trained}"
        )
        return result.train_reward, total

    def _search_unit(self) -> tuple[float, bool]:
        """One harness-search iteration; the incumbent's search score and whether it changed."""
        st, tasks = self.state, self.splits["search"]
        incumbent = self.archive.load(st.incumbent)
        ev = self._current_eval(st.incumbent, st.incumbent_eval)
        proposer = build_proposer(self.cfg, self.domain, self.usage, st.search_iters, self.console, tasks[0])
        seed = self.cfg.seed + st.search_iters
        with self.bars(
            f"search iteration {st.search_iters + 1}", self.search_settings.rollouts(len(tasks))
        ) as tick:
            result = harness_step(
                self.runner, self.archive, proposer, incumbent, ev, tasks, self.search_settings, seed, tick
            )
        st.search_iters += 1
        self._charge(result.rollouts, "search")
        record_proposal(self.state, self.cfg, self.usage, result.proposal, len(result.rollouts))
        st.incumbent, st.incumbent_eval = result.incumbent.id, asdict(result.incumbent_eval)
        self._search_event(result, result.incumbent_eval.mean, result.accepted)
        verdict = "accepted" if result.accepted else "kept incumbent"
        self.console.print(f"  search iteration {st.search_iters}: {verdict} — {result.reason}")
        return result.incumbent_eval.mean, result.accepted

    def _population_unit(self) -> tuple[float, bool]:
        """fast-slow: re-score the population under the current weights and add prompt-text children; the
        acceptance rule decides whether one becomes the leader, the harness used at evaluation."""
        st, tasks = self.state, self.splits["search"]
        known = {e["candidate_id"]: e for e in st.population or []}
        population = [self._current_eval(cid, known.get(cid)) for cid in known or [st.incumbent]]
        proposer = build_proposer(self.cfg, self.domain, self.usage, st.search_iters, self.console, tasks[0])
        total = self.search_settings.rollouts(len(tasks))
        with self.bars(f"population iteration {st.search_iters + 1}", total) as tick:
            result = population_step(
                self.runner,
                self.archive,
                proposer,
                population,
                tasks,
                self.search_settings,
                st.search_iters,
                tick,
            )
        st.search_iters += 1
        self._charge(result.rollouts, "search")
        record_proposal(self.state, self.cfg, self.usage, result.proposal, len(result.rollouts))
        best = result.population[0]
        changed = best.candidate_id != st.incumbent
        st.population = [asdict(e) for e in result.population]
        st.incumbent, st.incumbent_eval = best.candidate_id, asdict(best)
        members = {e.candidate_id: e.mean for e in result.population}
        self._search_event(result, best.mean, changed, population=members)
        shown = ", ".join(f"{e.candidate_id} {e.mean:.3f}" for e in result.population)
        self.console.print(f"  population iteration {st.search_iters}: {shown}")
        return best.mean, changed

    def _current_eval(self, candidate_id: str, known: dict[str, Any] | None) -> CandidateEval:
        """The candidate's search-split score under the current weights; re-scored (and charged) if stale."""
        ev = CandidateEval(**known) if known else None
        if ev is not None and ev.weights_version == self.runner.weights_version:
            return ev
        tasks, n = self.splits["search"], self.cfg.search.rollouts_per_task
        with self.bars(f"re-evaluating {candidate_id}", len(tasks) * n) as tick:
            ev, spent = evaluate_candidate(
                self.runner, self.archive, self.archive.load(candidate_id), tasks, n, tick
            )
        self._charge(spent, "search")
        self._event(events.Reeval(candidate_id, ev.mean, len(spent)))
        return ev

    def _search_event(self, result: Any, score: float, accepted: bool, **extra: Any) -> None:
        """One search_iteration record, for an IterationResult or a PopulationResult."""
        st = self.state
        self._event(
            events.SearchIteration(
                st.search_iters,
                st.incumbent,
                score,
                accepted,
                result.reason,
                extra.get("population"),
                {e.candidate_id: e.mean for e in result.evaluated},
                result.failed,
                len(result.rollouts),
                result.proposal.note,
                result.proposal.cost,
                result.decision_rollouts,
            )  # fmt: skip
        )

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

    def _evaluate(self, label: str, weights_pending: bool = False) -> None:
        """Score the incumbent on val and test. The record names the checkpoint folder holding the weights
        evaluated (None: the base model; `weights_pending`: they are saved when this unit commits), so
        every evaluation point is an agent version that `whale export` can rebuild. When neither the weights
        nor the incumbent changed since the last point, that point is copied (`repeats`): with per-call
        seeds it would draw the same rollouts again, and without them the same distribution."""
        st, k = self.state, self.cfg.eval.k
        last = self.dir.points()[-1] if st.eval_points else None
        if last and last["weights"] == self.runner.weights_version and last["harness"] == st.incumbent:
            self._copy_eval(self.dir, last["point"], label, repeats=last["point"])
            return
        harness = self.archive.load(st.incumbent)
        checkpoint = self._checkpoint_name() if weights_pending else st.checkpoint
        record = self._point_record(label, checkpoint, harness.id)
        for split, (rollouts, score) in evaluate(self.runner, harness, self.splits, k, self.bars).items():
            self.dir.write_eval_rows(st.eval_points, split, [r.to_json() for r in rollouts])
            self._charge(rollouts, "eval")
            record[split] = score
        self._add_point(record)
        self.console.print(eval_line(record, k))

    def _copy_eval(self, source: RunDir, point: int, label: str, **provenance: Any) -> None:
        """Evaluation point `point` of run `source` as this run's next point: the same rollouts and scores,
        charged to this run's evaluation cost as a fresh evaluation would be."""
        st = self.state
        record, rows = copied_point(source, point)
        for split, split_rows in rows.items():
            self.dir.write_eval_rows(st.eval_points, split, split_rows)
            self._charge([Rollout.from_json(r) for r in split_rows], "eval")
        record.update(self._point_record(label, st.checkpoint, st.incumbent), **provenance)
        self._add_point(record)
        same = f"point {point}" if source.path == self.out else f"point {point} of {source.path}"
        self.console.print(eval_line(record, self.cfg.eval.k, copied_from=same))

    def _point_record(self, label: str, checkpoint: str | None, harness: str) -> dict[str, Any]:
        phase = ScheduleState(**self.state.schedule).kind
        return {
            "point": self.state.eval_points, "label": label, "phase": phase,
            "weights": self.runner.weights_version, "checkpoint": checkpoint, "harness": harness,
        }  # fmt: skip

    def _add_point(self, record: dict[str, Any]) -> None:
        b = self.budget
        record.update(rollouts=b.rollouts, wall_s=round(b.wall_s, 2))
        self.dir.append(EVALS, [record])
        self.tracker.log(record, b.rollouts)
        self.state.eval_points += 1

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
            code_versions=with_version(None),
        )
        compute = {"engine": self.engine_dtype, "trainer": self.trainer.config.dtype}
        self.console.print(f"compute: engine {compute['engine']}; trainer {compute['trainer']}")
        self.dir.append(EVENTS, [events.Start(self.cfg.model_dump(), compute).to_json()])
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
        state.code_versions = with_version(state.code_versions)
        self.dir.append(EVENTS, [events.Resume(state.unit).to_json()])
        return state

    def _commit(self, weights_changed: bool, boundary: bool) -> None:
        """Persist weights (if changed) then state.json; state.json is the single commit point. Checkpoint
        folders neither kept (boundaries, thinned by `checkpoints.keep_every`) nor the latest go after it."""
        st = self.state
        if weights_changed:
            name = self._checkpoint_name()
            tmp = self.dir.checkpoint(f".{name}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            self.trainer.save(tmp)
            st.checkpoint_bytes += folder_bytes(tmp)
            tmp.rename(self.dir.checkpoint(name))
            st.checkpoint = name
        if boundary and st.checkpoint:
            st.kept_checkpoints = sorted(set(st.kept_checkpoints or []) | {st.checkpoint})
        keep = self.cfg.checkpoints
        if keep.keep_every > 1 and st.kept_checkpoints:
            retained = retained_checkpoints(self.dir.points(), keep.keep_every, keep.keep_best)
            st.kept_checkpoints = sorted(set(st.kept_checkpoints) & retained)
        st.engine_calls = self.runner.engine_calls
        self.dir.commit(st, self.archive.ids())
        self.dir.keep_checkpoints(
            set(st.kept_checkpoints or []) | {st.checkpoint, st.reference_checkpoint}, "u"
        )

    def _finish(self, reason: str) -> None:
        self.state.finished = True
        self._event(events.End(reason))
        self._commit(weights_changed=False, boundary=False)

    def summary(self) -> dict[str, Any]:
        return summarize_run(self.out)

    def start_eval_source(self) -> Path | None:
        seed = self.archive.load("c0000").source
        return start_eval_source(self.cfg, self.out, seed, self.start_eval_from)
