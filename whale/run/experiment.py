"""Builds every component from a Config, drives the schedule, and owns the run directory.

Run directory:
    config.yaml            resolved config
    events.jsonl           one record per weight step, search iteration and phase switch (with the signal
                           values that caused it)
    evals.jsonl            one record per evaluation point (validation and test mean@k with CIs), taken
                           every `eval.every_rollouts` budget rollouts so that curves of methods line up;
                           point 0 may be copied from a sibling run of a comparison (`reused_from`)
    rollouts/train.jsonl   every RFT rollout
    evals/<point>/<split>.jsonl   evaluation rollouts
    search/                the archive (see whale.search.archive)
    checkpoints/<unit>/    trainable weights + optimizer; those of evaluation points and phase switches are
                           kept (thinned by `checkpoints.keep_every`), so every evaluation point is an
                           agent version `whale export` can rebuild (whale.deploy.versions)
    state.json             the commit point: written last, atomically, after every unit of work

Resume reads state.json, cuts every JSONL back to the length it had at that commit, drops archive
candidates and checkpoint folders written after it, and continues: nothing finished is redone or counted
twice, and an unfinished unit is redone from its start.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from whale.core.config import Config, ConfigError, config_from_dict
from whale.core.files import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    jsonl_line_count,
    read_json,
    read_jsonl,
    truncate_jsonl,
)
from whale.core.progress import track
from whale.core.stats import SplitScore, score_split
from whale.domains.registry import build_domain
from whale.harness import validate
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.model.distributed import build_trainer
from whale.model.loading import check_model_name
from whale.model.losses import Objective
from whale.model.trainer import training_units
from whale.rollout.build import build_executor
from whale.run.budget import Budget
from whale.run.disk import folder_bytes, retained_checkpoints
from whale.run.schedule import HARNESS, WEIGHTS, ScheduleState, SinglePhase, UnitReport, build_schedule
from whale.run.status import claim, release
from whale.run.summary import run_summary
from whale.run.tracking import Tracker, check_tracking
from whale.search.archive import Archive, CandidateEval
from whale.search.mutation import MutationProposer
from whale.search.proposer import (
    Proposal,
    ProposalRequest,
    Proposer,
    ProposerUsage,
    budget_spent,
    full_brief,
)
from whale.search.step import evaluate_candidate, population_iteration, search_iteration
from whale.weights.step import LOSS_OF, build_batch, sample, train_on

LOGS = ("events.jsonl", "evals.jsonl", "rollouts/train.jsonl", "search/evolution_summary.jsonl")


@dataclass
class RunState:
    schedule: dict[str, Any]
    budget: dict[str, Any]
    unit: int = 0
    weight_steps: int = 0
    weights_version: str = "w0"  # the weights served: w<the last step that changed them>
    search_iters: int = 0
    eval_points: int = 0
    incumbent: str = "c0000"
    incumbent_eval: dict[str, Any] | None = None
    population: list[dict[str, Any]] | None = None  # fast-slow: CandidateEval of each member
    proposer_usage: dict[str, Any] | None = None  # LLM/agent sessions, tokens, USD, seconds so far
    proposer_spent: str = ""  # why the proposer may not run again, once its budget is spent
    next_eval_at: int = 0  # budget rollouts at which the next evaluation is due
    checkpoint: str | None = None
    kept_checkpoints: list[str] | None = None
    checkpoint_bytes: int = 0  # weights checkpoints written over the run's life (retention deletes some)
    reference_checkpoint: str | None = None  # the weights at the current weight phase's start (None: initial)
    engine_calls: int = 0
    log_lines: dict[str, int] | None = None
    candidates: list[str] | None = None
    finished: bool = False


class Experiment:
    def __init__(
        self,
        cfg: Config,
        out: Path,
        console: Console | None = None,
        resume: bool = False,
        start_eval_from: list[Path] = (),
    ):
        self.cfg = cfg
        self.start_eval_from = list(start_eval_from)  # sibling runs that may lend their point 0
        self.out = out
        self.console = console or Console()
        if resume and (out / "state.json").exists():
            claim(out)  # first of all: two processes must never work on one run
        check_model_name(cfg.model.name)
        check_engine(cfg)
        check_proposer(cfg)
        check_tracking(cfg.tracking)
        self.domain = build_domain(cfg.domain)
        self.splits = self.domain.splits()
        seed = None if resume else self._seed_candidate()
        self.schedule = build_schedule(cfg.schedule, len(self.splits["train"]), cfg.rft.tasks_per_step)
        self.trainer, tokenizer = build_trainer(cfg)
        # engine.dtype "auto" is decided once here, so every engine of the run (Ray actors too) agrees
        engine_cfg, self.engine_dtype = resolve_engine_dtype(cfg, self.trainer.model, tokenizer)
        self.runner = build_executor(engine_cfg, self.trainer.model, tokenizer, self.domain, self.trainer)
        self._prepare_dir(resume)  # only now: a config, domain or model error leaves nothing on disk
        self.archive = Archive(out / "search")
        self.state = self._load_state() if resume else self._fresh_state(seed)
        self.usage = ProposerUsage(**(self.state.proposer_usage or {}))
        if self.state.proposer_spent:
            self.schedule = SinglePhase(WEIGHTS)
        self.tracker = Tracker(cfg.tracking, out, cfg.model_dump())
        self.session_start = time.monotonic()
        self.wall_before = self.state.budget["wall_s"]

    # ---- run directory -------------------------------------------------------------------------

    def _prepare_dir(self, resume: bool) -> None:
        if resume:
            if not (self.out / "state.json").exists():
                raise ConfigError(
                    f"--resume {self.out}: no state.json there (not a whale run, or it never started)"
                )
            return
        if (self.out / "state.json").exists():
            raise ConfigError(f"{self.out} already holds a run; use --resume {self.out} or another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        claim(self.out)
        atomic_write_text(self.out / "config.yaml", yaml.safe_dump(self.cfg.model_dump(), sort_keys=False))

    def _seed_candidate(self) -> HarnessCandidate:
        path = self.cfg.domain.harness
        if path:
            if not Path(path).is_file():
                raise ConfigError(f"domain.harness: file not found: {path}")
            source = Path(path).read_text()
        else:
            source = self.domain.seed_harness()
        problems = validate.problems(source)
        if problems:
            raise ConfigError(f"seed harness {path or self.domain.name}: {problems[0]}")
        return HarnessCandidate("c0000", source, None, "seed harness", "seed")

    def _fresh_state(self, seed: HarnessCandidate) -> RunState:
        self.archive.add(seed, status="seed")
        state = RunState(
            schedule=self.schedule.initial().to_json(),
            budget=Budget(self.cfg.schedule.budget_rollouts).to_json(),
            next_eval_at=self.cfg.eval.every_rollouts,
        )
        self.state = state
        compute = {"engine": self.engine_dtype, "trainer": self.trainer.config.dtype}
        self.console.print(f"compute: engine {compute['engine']}; trainer {compute['trainer']}")
        start = {"event": "start", "config": self.cfg.model_dump(), "compute": compute}
        append_jsonl(self.out / "events.jsonl", [start])
        self._commit(weights_changed=False, boundary=False)
        return state

    def _load_state(self) -> RunState:
        raw = read_json(self.out / "state.json")
        raw.setdefault("weights_version", f"w{raw.get('weight_steps', 0)}")  # a run begun before the field
        state = RunState(**raw)
        for name, n in (state.log_lines or {}).items():
            if (self.out / name).exists():
                truncate_jsonl(self.out / name, n)
        self.archive.forget_after(state.candidates or [])
        keep = set(state.kept_checkpoints or []) | {state.checkpoint}
        for folder in (self.out / "checkpoints").glob("*"):
            if folder.name not in keep:
                shutil.rmtree(folder, ignore_errors=True)
        if self._needs_reference() and state.reference_checkpoint:
            self.trainer.load_reference(self.out / "checkpoints" / state.reference_checkpoint)
        elif self._needs_reference():
            self.trainer.freeze_reference()  # the initial weights, before a checkpoint replaces them
        if state.checkpoint:
            self.trainer.load(self.out / "checkpoints" / state.checkpoint)
        self.runner.sync_weights(state.weights_version, self.trainer)
        self.runner.engine_calls = state.engine_calls
        append_jsonl(self.out / "events.jsonl", [{"event": "resume", "unit": state.unit}])
        return state

    def _checkpoint_name(self) -> str:
        """The folder the weights of the current unit go to when it commits."""
        return f"u{self.state.unit:05d}"

    def _commit(self, weights_changed: bool, boundary: bool) -> None:
        """Persist weights (if changed) then state.json; state.json is the single commit point. Checkpoint
        folders neither kept (boundaries, thinned by `checkpoints.keep_every`) nor the latest go after it."""
        st = self.state
        if weights_changed:
            name = self._checkpoint_name()
            tmp = self.out / "checkpoints" / f".{name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            self.trainer.save(tmp)
            st.checkpoint_bytes += folder_bytes(tmp)
            tmp.rename(self.out / "checkpoints" / name)
            st.checkpoint = name
        if boundary and st.checkpoint:
            st.kept_checkpoints = sorted(set(st.kept_checkpoints or []) | {st.checkpoint})
        keep = self.cfg.checkpoints
        if keep.keep_every > 1 and st.kept_checkpoints:
            points = read_jsonl(self.out / "evals.jsonl")
            retained = retained_checkpoints(points, keep.keep_every, keep.keep_best)
            st.kept_checkpoints = sorted(set(st.kept_checkpoints) & retained)
        st.engine_calls = self.runner.engine_calls
        st.log_lines = {name: jsonl_line_count(self.out / name) for name in LOGS}
        st.candidates = self.archive.ids()
        atomic_write_json(self.out / "state.json", asdict(st))
        keep_names = set(st.kept_checkpoints or []) | {st.checkpoint, st.reference_checkpoint}
        for folder in (self.out / "checkpoints").glob("u*"):
            if folder.name not in keep_names:
                shutil.rmtree(folder, ignore_errors=True)

    # ---- the loop --------------------------------------------------------------------------------

    @property
    def budget(self) -> Budget:
        return Budget(**self.state.budget)

    def _charge(self, rollouts: list[Rollout], kind: str) -> None:
        b = self.budget
        b.charge(rollouts, kind)
        b.wall_s = self.wall_before + time.monotonic() - self.session_start
        self.state.budget = b.to_json()

    def _event(self, record: dict[str, Any]) -> None:
        b = self.budget
        record.update(unit=self.state.unit, rollouts=b.rollouts, wall_s=round(b.wall_s, 2))
        append_jsonl(self.out / "events.jsonl", [record])
        self.tracker.log(record, b.rollouts)

    def run(self) -> dict[str, Any]:
        st, every = self.state, self.cfg.eval.every_rollouts
        if st.eval_points == 0:
            source = self.start_eval_source()
            if source is None:
                self._evaluate("start")
            else:
                self._copy_eval(source, 0, "start", reused_from=str(source))
            self._commit(weights_changed=False, boundary=True)
        if self.runner.sandbox_problems and not st.finished:
            self._event({"event": "sandbox_warning", "problems": self.runner.sandbox_problems})
        while not st.finished and not self.budget.exhausted:
            sched = ScheduleState(**st.schedule)
            if sched.kind == HARNESS and (st.proposer_spent or self._proposer_spent()):
                if not self._stop_searching(sched):
                    break
                continue
            served = self.runner.weights_version
            if sched.kind == WEIGHTS:
                value, improved = self._weight_step(), False
            else:
                value, improved = self._search_iteration()
            st.unit += 1
            b = self.budget
            decision = self.schedule.advance(
                sched, UnitReport(sched.kind, value, improved, b.rollouts, b.limit_rollouts)
            )
            st.schedule = decision.state.to_json()
            if decision.switched:
                self._event(
                    {
                        "event": "phase_switch",
                        "from": sched.kind,
                        "to": decision.state.kind,
                        "phase": sched.phase,
                        "length": sched.done_in_phase + 1,
                        "reason": decision.reason,
                        "signals": decision.signals,
                    }  # fmt: skip
                )
                self.console.print(
                    f"  phase switch {sched.kind} -> {decision.state.kind} after {sched.done_in_phase + 1} "
                    f"units: {decision.reason}"
                )
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
        release(self.out)
        return self.summary()

    def _finish(self, reason: str) -> None:
        self.state.finished = True
        self._event({"event": "end", "reason": reason})
        self._commit(weights_changed=False, boundary=False)

    def _proposer_spent(self) -> str:
        """Why the proposer may not run again ("" when it may); remembered in the state once true."""
        p = self.cfg.proposer
        if p.kind != "mutation":
            self.state.proposer_spent = budget_spent(self.usage, p.max_sessions, p.max_tokens, p.max_usd)
        return self.state.proposer_spent

    def _stop_searching(self, sched: ScheduleState) -> bool:
        """The proposer's budget is spent: weight steps take the rest of the budget, or, for harness-only,
        the run ends early and says why. Returns whether the run goes on."""
        reason = self.state.proposer_spent
        self.console.print(f"  {reason}: no more harness search")
        if self.cfg.schedule.method == "harness-only":
            self._evaluate("end")
            self._finish(f"stopped early, {reason}")
            return False
        self.schedule = SinglePhase(WEIGHTS)
        self.state.schedule = ScheduleState(WEIGHTS, sched.phase + 1).to_json()
        self._event({"event": "phase_switch", "from": HARNESS, "to": WEIGHTS, "phase": sched.phase,
                     "length": sched.done_in_phase, "reason": reason, "signals": {}})  # fmt: skip
        self._commit(weights_changed=False, boundary=True)
        return True

    def _needs_reference(self) -> bool:
        """DPO's loss and GRPO's KL penalty need the phase-start weights; otherwise the KL to them is only
        logged on request (`weights.log_kl`), since it costs a no-grad pass over every step's examples."""
        w = self.cfg.weights
        return w.algorithm == "dpo" or w.kl_coef > 0 or w.log_kl

    def _weight_step(self) -> float:
        """One weight step under the incumbent (fast-slow: a population member drawn per task)."""
        st, rft, w = self.state, self.cfg.rft, self.cfg.weights
        sched = ScheduleState(**st.schedule)
        if sched.done_in_phase == 0 and self._needs_reference():  # phase start: the reference (DPO, KL)
            self.trainer.freeze_reference()
            st.reference_checkpoint = st.checkpoint
            if st.checkpoint:
                st.kept_checkpoints = sorted(set(st.kept_checkpoints or []) | {st.checkpoint})
        members = [e["candidate_id"] for e in st.population or []] or [st.incumbent]
        harnesses = [self.archive.load(cid) for cid in members]
        rng = random.Random(self.cfg.seed * 1_000_003 + st.weight_steps)
        step = st.weight_steps + 1
        label = f"{w.algorithm.upper()} step {step}"
        with track(self.console, f"{label}: sampling", rft.tasks_per_step * rft.k) as tick:
            rollouts, used = sample(
                self.runner, harnesses, self.splits["train"], rng, rft.tasks_per_step, rft.k,
                f"rft{st.weight_steps}", tick, logprobs=w.algorithm == "grpo",
            )  # fmt: skip
        batch = build_batch(
            rollouts, w.algorithm, rft.reward_threshold, rft.max_kept_per_task, w.drop_uniform_groups,
            w.grpo_std_normalize,
        )  # fmt: skip
        objective = Objective(LOSS_OF[w.algorithm], w.dpo_beta, w.grpo_clip, w.kl_coef)
        n = self.trainer.optimizer_steps_for(len(training_units(batch.examples)))
        with track(self.console, f"{label}: training", n) as tick:
            result = train_on(self.trainer, rollouts, used, batch, objective, tick)
        st.weight_steps += 1
        if result.optimizer_steps:  # else nothing was kept: the same weights, label and search scores
            st.weights_version = f"w{st.weight_steps}"
            self.runner.sync_weights(st.weights_version, self.trainer)
            st.incumbent_eval = None
        append_jsonl(self.out / "rollouts" / "train.jsonl", [r.to_json() for r in result.rollouts])
        self._charge(result.rollouts, "train")
        self._event(
            {
                "event": "weight_step",
                "step": st.weight_steps,
                "phase": sched.phase,
                "algorithm": w.algorithm,
                "harnesses": result.harnesses,
                "train_reward": result.train_reward,
                "kept": result.kept,
                "total": len(result.rollouts),
                "kept_fraction": result.kept / max(len(result.rollouts), 1),
                "examples": result.examples,
                "examples_by_harness": result.by_harness,
                "dropped_tasks": result.dropped_tasks,
                "loss": result.loss,
                "kl": result.kl,
                "margin": result.margin,
                "mean_abs_advantage": result.mean_abs_advantage,
                "optimizer_steps": result.optimizer_steps,
                "weights": self.runner.weights_version,
            }  # fmt: skip
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
        self.console.print(
            f"  weight step {st.weight_steps} ({w.algorithm}): train reward {result.train_reward:.3f}, "
            f"kept {result.kept}/{len(result.rollouts)}, "
            + (
                f"loss {result.loss:.3f}{extra}"
                if result.optimizer_steps
                else f"no update: {self.runner.weights_version} stays"
            )
        )
        return result.train_reward

    def _proposer(self) -> Proposer:
        """The configured proposer. The mutation proposer is re-seeded per iteration, so a resumed run
        proposes what an uninterrupted one would have; LLM and agent proposers charge `self.usage`."""
        p = self.cfg.proposer
        if p.kind == "llm":
            from whale.search.llm_proposer import LLMProposer

            return ShownProposer(LLMProposer(p, self.usage, seed=self.cfg.seed), self.console)
        if p.kind == "agent":
            from whale.search.agent_proposer import AgentProposer

            return ShownProposer(AgentProposer(p, self.usage), self.console)
        return MutationProposer(
            self.domain.knob_pool(),
            seed=self.cfg.seed * 7919 + self.state.search_iters,
            text_only=self.cfg.schedule.method == "fast-slow",
        )

    @property
    def brief(self) -> str:
        text = full_brief(self.domain.brief)
        if self.cfg.schedule.method == "fast-slow":
            text += "\nThis run evolves prompts only: change the text sent to the model, not the logic.\n"
        return text

    def _search_event(self, result: Any, score: float, accepted: bool, **extra: Any) -> None:
        """One search_iteration record, for an IterationResult or a PopulationResult."""
        st = self.state
        self._event(
            {
                "event": "search_iteration",
                "iteration": st.search_iters,
                "incumbent": st.incumbent,
                "incumbent_score": score,
                "accepted": accepted,
                **extra,
                "candidates": {e.candidate_id: e.mean for e in result.evaluated},
                "failed": result.failed,
                "spent": len(result.rollouts),
                "proposal": result.proposal.note,
                "proposer_cost": result.proposal.cost,
            }  # fmt: skip
        )

    def _record_proposal(self, proposal: Proposal) -> None:
        self.state.proposer_usage = asdict(self.usage)
        if proposal.exhausted:
            p = self.cfg.proposer
            self.state.proposer_spent = (
                budget_spent(self.usage, p.max_sessions, p.max_tokens, p.max_usd) or "proposer budget spent"
            )

    def _current_eval(self, candidate_id: str, known: dict[str, Any] | None) -> CandidateEval:
        """The candidate's search-split score under the current weights; re-scored (and charged) if stale."""
        ev = CandidateEval(**known) if known else None
        if ev is not None and ev.weights_version == self.runner.weights_version:
            return ev
        tasks, n = self.splits["search"], self.cfg.search.rollouts_per_task
        with track(self.console, f"re-evaluating {candidate_id}", len(tasks) * n) as tick:
            ev, spent = evaluate_candidate(
                self.runner, self.archive, self.archive.load(candidate_id), tasks, n, tick
            )
        self._charge(spent, "search")
        self._event({"event": "reeval", "harness": candidate_id, "score": ev.mean, "spent": len(spent)})
        return ev

    def _search_iteration(self) -> tuple[float, bool]:
        """One harness-search iteration; returns the incumbent's search score and whether it changed."""
        if self.cfg.schedule.method == "fast-slow":
            return self._population_iteration()
        st, sc = self.state, self.cfg.search
        tasks = self.splits["search"]
        incumbent = self.archive.load(st.incumbent)
        ev = self._current_eval(st.incumbent, st.incumbent_eval)
        total = sc.candidates_per_iter * (len(tasks) * sc.rollouts_per_task + sc.smoke_tasks)
        with track(self.console, f"search iteration {st.search_iters + 1}", total) as tick:
            result = search_iteration(
                self.runner, self.archive, self._proposer(), incumbent, ev, tasks, sc.candidates_per_iter,
                sc.rollouts_per_task, sc.smoke_tasks, sc.alpha, self.cfg.seed + st.search_iters, tick,
                self.brief,
            )  # fmt: skip
        st.search_iters += 1
        self._charge(result.rollouts, "search")
        self._record_proposal(result.proposal)
        st.incumbent = result.incumbent.id
        st.incumbent_eval = asdict(result.incumbent_eval)
        self._search_event(result, result.incumbent_eval.mean, result.accepted, reason=result.reason)
        verdict = "accepted" if result.accepted else "kept incumbent"
        self.console.print(f"  search iteration {st.search_iters}: {verdict} — {result.reason}")
        return result.incumbent_eval.mean, result.accepted

    def _population_iteration(self) -> tuple[float, bool]:
        """fast-slow: re-score the population under the current weights, add prompt-text children, keep
        the top `schedule.population`; the best member becomes the harness used at evaluation."""
        st, sc = self.state, self.cfg.search
        tasks = self.splits["search"]
        known = {e["candidate_id"]: e for e in st.population or []}
        population = [self._current_eval(cid, known.get(cid)) for cid in known or [st.incumbent]]
        total = sc.candidates_per_iter * (len(tasks) * sc.rollouts_per_task + sc.smoke_tasks)
        with track(self.console, f"population iteration {st.search_iters + 1}", total) as tick:
            result = population_iteration(
                self.runner, self.archive, self._proposer(), population, tasks, sc.candidates_per_iter,
                sc.rollouts_per_task, sc.smoke_tasks, self.cfg.schedule.population, tick,
                self.brief, st.search_iters,
            )  # fmt: skip
        st.search_iters += 1
        self._charge(result.rollouts, "search")
        self._record_proposal(result.proposal)
        best = result.population[0]
        changed = best.candidate_id != st.incumbent
        st.population = [asdict(e) for e in result.population]
        st.incumbent, st.incumbent_eval = best.candidate_id, asdict(best)
        self._search_event(
            result, best.mean, changed, population={e.candidate_id: e.mean for e in result.population}
        )
        members = ", ".join(f"{e.candidate_id} {e.mean:.3f}" for e in result.population)
        self.console.print(f"  population iteration {st.search_iters}: {members}")
        return best.mean, changed

    def start_eval_source(self) -> Path | None:
        """The first sibling run whose committed start evaluation this run would repeat: same config but
        for the schedule and the weight algorithm (so the same base weights, seed harness, tasks and per-call
        seeds). A comparison evaluates point 0 once per seed instead of once per method."""
        mine = start_eval_key(self.cfg)
        seed_source = self.archive.load("c0000").source
        for folder in self.start_eval_from:
            state, config = folder / "state.json", folder / "config.yaml"
            if folder.resolve() == self.out.resolve() or not state.is_file() or not config.is_file():
                continue
            if read_json(state).get("eval_points", 0) < 1:
                continue
            theirs = config_from_dict(yaml.safe_load(config.read_text()), str(config))
            harness = folder / "search" / "candidates" / "c0000" / "harness.py"
            if start_eval_key(theirs) == mine and harness.is_file() and harness.read_text() == seed_source:
                return folder
        return None

    def _copy_eval(self, source: Path, point: int, label: str, **provenance: Any) -> None:
        """Evaluation point `point` of run `source` as this run's next point: the same rollouts and scores,
        charged to this run's evaluation cost as a fresh evaluation would be."""
        st = self.state
        record = next(r for r in read_jsonl(source / "evals.jsonl") if r["point"] == point)
        record = {k: v for k, v in record.items() if k not in ("reused_from", "repeats")}
        folder = self.out / "evals" / f"{st.eval_points:03d}"
        for split in ("val", "test"):
            rows = read_jsonl(source / "evals" / f"{point:03d}" / f"{split}.jsonl")
            (folder / f"{split}.jsonl").unlink(missing_ok=True)
            append_jsonl(folder / f"{split}.jsonl", rows)
            self._charge([Rollout.from_json(r) for r in rows], "eval")
        b = self.budget
        record.update(
            point=st.eval_points, label=label, phase=ScheduleState(**st.schedule).kind,
            weights=self.runner.weights_version, checkpoint=st.checkpoint, harness=st.incumbent,
            rollouts=b.rollouts, wall_s=round(b.wall_s, 2), **provenance,
        )  # fmt: skip
        append_jsonl(self.out / "evals.jsonl", [record])
        self.tracker.log(record, b.rollouts)
        st.eval_points += 1
        v, t, k = record["val"], record["test"], self.cfg.eval.k
        same = f"point {point}" if source == self.out else f"point {point} of {source}"
        self.console.print(
            f"[bold]eval {record['point']}[/bold] ({label}; {b.rollouts} rollouts; the same as {same}): "
            f"val mean@{k} {v['mean']:.3f}  test mean@{k} {t['mean']:.3f}"
        )

    def _evaluate(self, label: str, weights_pending: bool = False) -> None:
        """Score the incumbent on val and test. The record names the checkpoint folder holding the weights
        evaluated (None: the base model; `weights_pending`: they are saved when this unit commits), so
        every evaluation point is an agent version that `whale export` can rebuild. When neither the weights
        nor the incumbent changed since the last point, that point is copied (`repeats`): with per-call
        seeds it would draw the same rollouts again, and without them the same distribution."""
        st, k = self.state, self.cfg.eval.k
        last = read_jsonl(self.out / "evals.jsonl")[-1] if st.eval_points else None
        if last and last["weights"] == self.runner.weights_version and last["harness"] == st.incumbent:
            self._copy_eval(self.out, last["point"], label, repeats=last["point"])
            return
        harness = self.archive.load(st.incumbent)
        checkpoint = self._checkpoint_name() if weights_pending else st.checkpoint
        record: dict[str, Any] = {
            "point": st.eval_points, "label": label, "phase": ScheduleState(**st.schedule).kind,
            "weights": self.runner.weights_version, "checkpoint": checkpoint, "harness": harness.id,
        }  # fmt: skip
        for split in ("val", "test"):
            tasks = self.splits[split]
            with track(self.console, f"evaluating {split} mean@{k}", len(tasks) * k) as tick:
                rollouts = self.runner.run([RolloutJob(t, harness, s) for t in tasks for s in range(k)], tick)
            folder = self.out / "evals" / f"{st.eval_points:03d}"
            (folder / f"{split}.jsonl").unlink(missing_ok=True)
            append_jsonl(folder / f"{split}.jsonl", [r.to_json() for r in rollouts])
            self._charge(rollouts, "eval")
            record[split] = asdict(score_rollouts(rollouts, tasks))
        b = self.budget
        record.update(rollouts=b.rollouts, wall_s=round(b.wall_s, 2))
        append_jsonl(self.out / "evals.jsonl", [record])
        self.tracker.log(record, b.rollouts)
        st.eval_points += 1
        v, t = record["val"], record["test"]
        self.console.print(
            f"[bold]eval {record['point']}[/bold] ({label}; {b.rollouts} rollouts): "
            f"val mean@{k} {v['mean']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]  "
            f"test mean@{k} {t['mean']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}]"
        )

    # ---- results ---------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return summarize_run(self.out)


def start_eval_key(cfg: Config) -> dict[str, Any]:
    """Everything that decides a run's start evaluation: the config without the schedule and the weight
    algorithm (what `whale compare` varies between methods); checkpoints and tracking do not score."""
    data = cfg.model_dump()
    for key in ("schedule", "checkpoints", "tracking"):
        data.pop(key, None)
    data["weights"].pop("algorithm", None)
    return data


@dataclass
class ShownProposer:
    """A proposer whose sessions show a live bar (elapsed time, candidates returned): LLM calls and agent
    sessions take minutes, and a silent terminal looks hung."""

    inner: Proposer
    console: Console

    @property
    def name(self) -> str:
        return self.inner.name

    def propose(self, request: ProposalRequest) -> Proposal:
        label = f"{self.inner.name} proposer: up to {request.n} candidates"
        with track(self.console, label, request.n) as tick:
            proposal = self.inner.propose(request)
            for _ in proposal.candidates:
                tick()
        return proposal


def check_proposer(cfg: Config) -> None:
    """A misconfigured LLM or agent proposer is a start-up error, not a silently empty search later."""
    p = cfg.proposer
    try:
        if p.kind == "llm":
            from whale.search.llm_proposer import LLMProposer

            LLMProposer(p, ProposerUsage())
        elif p.kind == "agent":
            from whale.search.agent_proposer import AgentProposer

            problem = AgentProposer(p, ProposerUsage()).check()
            if problem:
                raise ValueError(problem)
    except ValueError as exc:
        raise ConfigError(f"proposer: {exc}") from None


def resolve_engine_dtype(cfg: Config, model: Any, tokenizer: Any) -> tuple[Config, str]:
    """The config the engines are built from (a fast engine's "auto" dtype replaced by the probe's
    choice) and what to log about it."""
    if cfg.engine.kind != "fast":
        return cfg, f"the model's ({cfg.engine.kind} engine)"
    from whale.model.dtype_probe import pick_dtype

    dtype, why = pick_dtype(model, tokenizer, cfg.engine.dtype)
    name = str(dtype).removeprefix("torch.")
    engine = cfg.engine.model_copy(update={"dtype": name})
    return cfg.model_copy(update={"engine": engine}), f"{name} ({why})"


def check_engine(cfg: Config) -> None:
    """An engine that cannot serve this run is a one-line start-up error, before any model is loaded:
    vLLM not installed; a remote server misconfigured, or asked to feed weight phases without ids."""
    e = cfg.engine
    try:
        if e.kind == "vllm":
            from whale.model.vllm_engine import import_vllm

            if cfg.model.name == "tiny":
                raise ValueError("engine.kind=vllm loads the model from a folder; model.name=tiny has none")
            import_vllm()
        elif e.kind == "remote":
            from whale.model.remote_engine import RemoteEngine, weight_phase_problem

            engine = RemoteEngine(e.remote)  # checks the URL and the API key variable
            trains = cfg.schedule.method != "harness-only"
            problem = weight_phase_problem(engine, cfg.weights.lora) if trains else ""
            engine.close()
            if problem:
                raise ValueError(problem)
    except (ImportError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def score_rollouts(rollouts: list[Rollout], tasks: list[Any]) -> SplitScore:
    """mean@k with CI, pass@k and maj@k over tasks, from rollouts grouped by task id."""
    by_task: dict[str, list[Rollout]] = {t.id: [] for t in tasks}
    for r in rollouts:
        by_task[r.task_id].append(r)
    rewards = [[r.reward for r in rs] for rs in by_task.values()]
    answers = [[r.answer for r in rs] for rs in by_task.values()]
    return score_split(rewards, answers)


def summarize_run(out: Path) -> dict[str, Any]:
    """The run's summary (see whale.run.summary), also written to summary.json."""
    summary = run_summary(out)
    if summary is None:
        raise ConfigError(f"{out}: no evaluation points yet")
    atomic_write_json(out / "summary.json", {k: v for k, v in summary.items() if k != "points"})
    return summary
