"""Rollouts spread over Ray actors: `executor.kind: ray` (docs/ray.md).

Each RolloutActor holds its own copy of the model (wrapped as the trainer wraps it, so LoRA adapter names
match), an engine built from `engine.kind`, the domain, and a RolloutRunner whose sandbox workers are
subprocesses of the actor. The driver keeps the trainer. After every weight update it puts the trainable
state (the LoRA adapter under LoRA) into the object store once; each actor loads it and reports the
version it now serves. A job's model calls are seeded from its task, sample, salt and call index, so its
rollout does not depend on which actor ran it, and the results equal the local executor's.

Jobs go out in chunks (at most `runner.workers` jobs, the width an actor batches at once). A chunk is the
unit of acceptance: its rollouts reach the caller, `on_done` and the budget only when the whole chunk comes
back. When an actor's process dies mid-chunk, Ray restarts it (`executor.max_restarts`) and the chunk is
submitted again, to whichever actor is free, up to `executor.max_retries` times; what the dead actor had
done is discarded, so nothing is counted twice. A restarted actor loads the current weights before it runs
anything, because every call names the version it expects.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import ray
import ray.exceptions

from whale.core.config import Config, ConfigError, ExecutorConfig, config_from_dict
from whale.harness.calls import RolloutJob
from whale.harness.records import Rollout

MB = 1 << 20
PROBE_PAUSE_S = 0.2  # between readiness probes of a restarting actor


def connect(cfg: ExecutorConfig) -> bool:
    """Join the cluster at `cfg.address`, or start a small local Ray. Returns whether whale started it
    (then `close` shuts it down). A process already connected to Ray is used as it is."""
    if ray.is_initialized():
        return False
    if cfg.address is None:
        cpus = cfg.num_cpus or max(1, math.ceil(cfg.actors * cfg.num_cpus_per_actor))
        ray.init(
            num_cpus=cpus, object_store_memory=cfg.object_store_mb * MB, include_dashboard=False,
            log_to_driver=False, configure_logging=False,
        )  # fmt: skip
        return True
    if cfg.address != "auto":
        check_reachable(cfg.address)
    try:
        ray.init(address=cfg.address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(f"executor.address {cfg.address}: cannot join the Ray cluster ({first})") from None
    return False


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Ray retries an unreachable address for minutes; a refused or silent port is a one-line error now."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, OverflowError) as exc:  # OverflowError: a port above 65535
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"executor.address {address}: no Ray cluster answers there ({reason})") from None


class RolloutActor:
    """One rollout slot: model copy, engine, domain and a RolloutRunner with its sandbox workers."""

    def __init__(self, cfg_data: dict[str, Any], cwd: str, threads: int, trained: bool):
        import torch

        from whale.domains.registry import build_domain
        from whale.model.backends import build_engine
        from whale.model.distributed import pad_id, trainer_config
        from whale.model.loading import load_model
        from whale.model.trainer import Trainer
        from whale.rollout.executor import build_runner

        if os.path.isdir(cwd):
            os.chdir(cwd)  # relative paths in the config (domain files, model folders) mean the driver's
        torch.set_num_threads(threads)
        cfg = config_from_dict(cfg_data)
        model, tokenizer = load_model(cfg.model.name, cfg.seed)
        if trained:  # wrapped as the driver's trainer wraps it, so the trainable state's names match
            model = Trainer(model, pad_id(tokenizer), trainer_config(cfg.weights), cfg.seed).model
        self.model = model
        engine = build_engine(cfg.engine, self.model, tokenizer, cfg.model.max_batch)
        self.runner = build_runner(cfg, engine, build_domain(cfg.domain))

    def pid(self) -> int:
        return os.getpid()

    def load_weights(self, version: str, boxed_state: list[Any]) -> str:
        """Load the trainable state (an ObjectRef in a list, so Ray hands it over unresolved) unless this
        actor already serves `version`; returns the version served."""
        if self.runner.weights_version != version and boxed_state[0] is not None:
            state = ray.get(boxed_state[0])
            unknown = set(state) - set(self.model.state_dict())
            if unknown:
                raise ValueError(f"the driver's trainable state has tensors this actor lacks: {min(unknown)}")
            self.model.load_state_dict(state, strict=False)
            self.runner.engine.weights_version = version
        return self.runner.weights_version

    def run(self, version: str, boxed_state: list[Any], jobs: list[RolloutJob]) -> dict[str, Any]:
        served = self.load_weights(version, boxed_state)
        before = self.runner.engine_calls
        rollouts = self.runner.run(jobs)
        return {
            "rollouts": rollouts,
            "engine_calls": self.runner.engine_calls - before,
            "sandbox_problems": list(self.runner.sandbox_problems),
            "weights_version": served,
        }


class RayExecutor:
    """The Executor over Ray actors; see the module docstring for the actor layout and failure policy."""

    def __init__(self, cfg: Config, weights: Any | None, version: str = "w0"):
        ex = cfg.executor
        self.cfg = ex
        self.chunk_size = cfg.runner.workers
        self.started_ray = connect(ex)
        actor_class = ray.remote(RolloutActor).options(
            num_cpus=ex.num_cpus_per_actor, num_gpus=ex.num_gpus_per_actor,
            max_restarts=ex.max_restarts, max_task_retries=0,
        )  # fmt: skip
        threads = max(1, int(ex.num_cpus_per_actor))
        trained = weights is not None
        self.actors = [
            actor_class.remote(cfg.model_dump(), os.getcwd(), threads, trained) for _ in range(ex.actors)
        ]
        self.engine_calls = 0
        self.sandbox_problems: list[str] = []
        self.retries = 0  # chunks resubmitted after their actor died
        self.version = version
        self.state_ref: Any = None  # None: the actors serve the model as loaded, never updated
        if weights is not None:
            self.sync_weights(version, weights)

    @property
    def weights_version(self) -> str:
        return self.version

    def sync_weights(self, version: str, source: Any) -> None:
        """Put the trainable state into the object store once; every live actor loads it and reports the
        version it serves. An actor that is restarting catches up at its next chunk."""
        self.state_ref = ray.put(source.trainable_state())
        self.version = version
        calls = [a.load_weights.remote(version, [self.state_ref]) for a in self.actors]
        for call in calls:
            try:
                served = ray.get(call)
            except ray.exceptions.RayActorError:
                continue
            if served != version:
                raise RuntimeError(f"ray executor: an actor serves {served} after loading {version}")

    def run(self, jobs: list[RolloutJob], on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]:
        size = max(1, min(self.chunk_size, -(-len(jobs) // max(1, len(self.actors)))))
        chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
        todo = deque(range(len(chunks)))
        idle = deque(self.actors)
        pending: dict[Any, tuple[int | None, Any]] = {}  # call -> (chunk index, or None for a probe; actor)
        results: dict[int, list[Rollout]] = {}
        attempts = [0] * len(chunks)
        while todo or pending:
            while todo and idle:
                index, actor = todo.popleft(), idle.popleft()
                pending[actor.run.remote(self.version, [self.state_ref], chunks[index])] = (index, actor)
            if not pending:
                raise RuntimeError("ray executor: every rollout actor died and none can be restarted")
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            index, actor = pending.pop(ref)
            try:
                out = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                if index is not None:
                    self._lost(index, len(chunks[index]), attempts, exc)
                    todo.appendleft(index)
                elif isinstance(exc, ray.exceptions.ActorDiedError):
                    self.actors.remove(actor)  # dead for good: its restarts are used up
                    continue
                else:
                    time.sleep(PROBE_PAUSE_S)  # restarting
                pending[actor.pid.remote()] = (None, actor)  # back to work once it answers
                continue
            if index is None:
                idle.append(actor)
                continue
            if out["weights_version"] != self.version:
                raise RuntimeError(
                    f"ray executor: a chunk ran under {out['weights_version']}, not {self.version}"
                )
            results[index] = out["rollouts"]
            self.engine_calls += out["engine_calls"]
            self.sandbox_problems += [p for p in out["sandbox_problems"] if p not in self.sandbox_problems]
            idle.append(actor)
            for rollout in out["rollouts"]:
                if on_done:
                    on_done(rollout)
        return [r for index in range(len(chunks)) for r in results[index]]

    def _lost(self, index: int, size: int, attempts: list[int], exc: Exception) -> None:
        """A chunk's actor died or became unavailable under it: whatever it did is discarded and the chunk
        goes back in the queue, unless it has been lost `max_retries` times already."""
        attempts[index] += 1
        if attempts[index] > self.cfg.max_retries:
            raise RuntimeError(
                f"ray executor: a chunk of {size} rollouts lost its actor {attempts[index]} times "
                f"({type(exc).__name__}); see executor.max_retries"
            ) from None
        self.retries += 1

    def actor_pids(self) -> list[int]:
        """Each actor's process id, waiting for restarting actors to come back."""
        pids = []
        for actor in self.actors:
            while True:
                try:
                    pids.append(ray.get(actor.pid.remote()))
                    break
                except ray.exceptions.ActorUnavailableError:
                    time.sleep(PROBE_PAUSE_S)
        return pids

    def close(self) -> None:
        """End the actors (their sandbox workers die with them) and a Ray that whale started."""
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        if self.started_ray:
            ray.shutdown()
