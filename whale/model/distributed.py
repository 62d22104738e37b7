"""Which trainer trains: one process (`weights.parallel: none`), or FSDP across `weights.world_size`
processes for models that do not fit one device (`fsdp`), behind the same Trainer interface.

DistributedTrainer keeps the driver's model as the copy that engines serve and checkpoints come from.
Each rank process loads the same model, wraps it as the driver did, takes the driver's trainable state,
shards it with FSDP2 (`fully_shard`, one unit per decoder layer) and keeps AdamW over its shards. A train
call plans minibatches and micro-batches exactly as Trainer.train does and deals the micro-batches out
round-robin; each rank runs forward and backward on its share through the same `token_nll`, the gradients
are summed across ranks (FSDP's reduce-scatter), and every rank clips and steps its shard. The per-step
loss is therefore the single-process loss, and the updated weights agree with it to float rounding.
Afterwards rank 0 gathers the trainable state and the driver loads it into its copy. Checkpoints use
Trainer's format (optimizer state keyed by parameter index), so a run may resume under either trainer.
"""

from __future__ import annotations

import os
import pickle
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from whale.core.config import Config, WeightsConfig
from whale.model.losses import SFT, Objective
from whale.model.trainer import Trainer, TrainerConfig, TrainExample, micro_batches, token_nll


def trainer_config(w: WeightsConfig, dtype: str = "float32") -> TrainerConfig:
    """The trainer's settings from the config; `dtype` already resolved (see resolve_train_dtype)."""
    return TrainerConfig(
        lora=w.lora, lora_r=w.lora_r, lora_alpha=w.lora_alpha, lr=w.lr,
        minibatch=w.minibatch, micro_batch=w.micro_batch, micro_batch_tokens=w.micro_batch_tokens,
        epochs=w.epochs, dtype=dtype,
    )  # fmt: skip


def resolve_train_dtype(choice: str, model: Any) -> str:
    """The trainer's compute dtype: "auto" is bfloat16 only where its matmuls measure clearly faster."""
    if choice != "auto":
        return choice
    from whale.model.dtype_probe import measured_dtype

    return measured_dtype(model)


def pad_id(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def build_trainer(cfg: Config) -> tuple[Trainer, Any]:
    """(trainer, tokenizer) for `cfg`: the model loaded by name, trained in one process or with FSDP."""
    from whale.model.loading import load_model

    model, tokenizer = load_model(cfg.model.name, cfg.seed)
    w = cfg.weights
    tc = trainer_config(w, resolve_train_dtype(w.dtype, model))
    if w.parallel == "none":
        return Trainer(model, pad_id(tokenizer), tc, seed=cfg.seed), tokenizer
    spec = RankSpec(cfg.model.name, cfg.seed, pad_id(tokenizer), tc)
    return DistributedTrainer(model, spec, w.world_size, w.backend), tokenizer


@dataclass(frozen=True)
class RankSpec:
    """What a rank needs to rebuild the driver's model: load it by name, wrap it with the same config."""

    model_name: str
    seed: int
    pad_id: int
    config: TrainerConfig


class DistributedTrainer(Trainer):
    """Trainer whose optimizer steps run in `world_size` FSDP rank processes (see the module docstring)."""

    def __init__(self, model: Any, spec: RankSpec, world_size: int, backend: str = "auto"):
        super().__init__(model, spec.pad_id, spec.config, seed=spec.seed)
        import torch.multiprocessing as mp

        if backend == "auto":
            backend = (
                "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "gloo"
            )
        self.world_size = world_size
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for rank in range(world_size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_rank_main, args=(rank, world_size, init_method, backend, spec, child), daemon=True
            )
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        self._ask("init", self.trainable_state())

    def _ask(self, op: str, *args: Any, per_rank: list[tuple] | None = None) -> list[Any]:
        """Send `op` to every rank, with `args` (or that rank's `per_rank` arguments), and return their
        replies in rank order."""
        for rank, conn in enumerate(self.conns):
            _send(conn, (op, *(per_rank[rank] if per_rank else args)))
        replies = []
        for rank, conn in enumerate(self.conns):
            try:
                status, value = _recv(conn)
            except (EOFError, OSError):
                proc = self.procs[rank]
                self.close()
                raise RuntimeError(f"training rank {rank} died (exit code {proc.exitcode})") from None
            if status != "ok":
                self.close()
                raise RuntimeError(f"training rank {rank} failed on {op}: {value}")
            replies.append(value)
        return replies

    def train(
        self,
        examples: list[TrainExample],
        on_step: Callable[[], None] | None = None,
        loss: Objective = SFT,
    ) -> dict[str, float | None]:
        if loss.kind != "sft":
            raise ValueError("weights.parallel=fsdp trains the SFT loss (algorithm rft) only")
        if not examples:
            return {"loss": float("nan"), "tokens": 0, "optimizer_steps": 0, "kl": None, "margin": None}
        cfg = self.config
        total_loss, total_tokens, opt_steps = 0.0, 0, 0
        for units, n_tokens in self.minibatches(examples, loss):
            micro = micro_batches(units, cfg.micro_batch, cfg.micro_batch_tokens)
            passes = -(-len(micro) // self.world_size)
            shares = [(micro[r :: self.world_size], n_tokens, passes) for r in range(self.world_size)]
            replies = self._ask("step", per_rank=shares)
            total_loss += sum(value for value, _ in replies)
            total_tokens += sum(count for _, count in replies)
            opt_steps += 1
            if on_step is not None:
                on_step()
        self.steps += opt_steps
        self.model.load_state_dict(self._ask("state")[0], strict=False)
        return {
            "loss": total_loss / max(total_tokens, 1),
            "tokens": total_tokens,
            "optimizer_steps": opt_steps,
            "kl": None,
            "margin": None,
        }

    def save(self, folder: Any) -> None:
        """Gather the sharded optimizer state into the driver's optimizer, then save as Trainer does."""
        gathered = self._ask("optimizer")[0]
        self.optimizer.load_state_dict(_by_index(gathered, self._trainable_names()))
        super().save(folder)

    def load(self, folder: Any) -> None:
        super().load(folder)
        optimizer = _by_name(self.optimizer.state_dict(), self._trainable_names())
        self._ask("load", self.trainable_state(), optimizer)

    def _trainable_names(self) -> list[str]:
        return [n for n, p in self.model.named_parameters() if p.requires_grad]

    def close(self) -> None:
        """Stop the rank processes (they also exit when the driver's end of their pipe closes)."""
        for conn in self.conns:
            try:
                _send(conn, ("stop",))
                conn.close()
            except OSError:
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.conns, self.procs = [], []


def _by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A full optimizer state keyed by parameter name (torch.distributed.checkpoint) -> Trainer's, keyed
    by the parameter's index among the trainable parameters."""
    index = {name: i for i, name in enumerate(names)}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]
    return {"state": {index[n]: v for n, v in state["state"].items()}, "param_groups": groups}


def _by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[i]: v for i, v in state["state"].items()}, "param_groups": groups}


def _send(conn: Any, message: Any) -> None:
    """Plain pickle over the pipe: torch's multiprocessing pickler would pass tensors through shared
    memory, and small tensors sent that way can come back aliased (AdamW's per-parameter step counters
    then advance together)."""
    conn.send_bytes(pickle.dumps(message))


def _recv(conn: Any) -> Any:
    return pickle.loads(conn.recv_bytes())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the rank process ---------------------------------------------------------------------------------


def _rank_main(rank: int, world: int, init_method: str, backend: str, spec: RankSpec, conn: Any) -> None:
    """Serve the driver's requests until it says stop or goes away."""
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world)
    try:
        rank_loop(rank, backend, spec, conn)
    finally:
        dist.destroy_process_group()


def rank_loop(rank: int, backend: str, spec: RankSpec, conn: Any) -> None:
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    from whale.model.loading import load_model, quiet_transformers

    quiet_transformers()
    if backend == "gloo":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.get_world_size()))
    else:
        torch.cuda.set_device(rank)
        # token_nll builds its batches with the default device; the rank's GPU is that device here.
        torch.set_default_device(f"cuda:{rank}")
    model, _ = load_model(spec.model_name, spec.seed)
    model = Trainer(model, spec.pad_id, spec.config, spec.seed).model  # wrapped exactly as the driver's
    optimizer = None
    full = StateDictOptions(full_state_dict=True, cpu_offload=True, strict=False)
    while True:
        try:
            msg = _recv(conn)
        except (EOFError, OSError):
            return
        op = msg[0]
        if op == "stop":
            return
        try:
            if op == "init":
                model.load_state_dict(msg[1], strict=False)
                model, optimizer = _shard(model, spec.config, backend, rank)
                reply: Any = None
            elif op == "step":
                reply = _step(model, optimizer, spec, *msg[1:])
            elif op == "state":
                reply = {
                    n: p.detach().full_tensor().cpu() for n, p in model.named_parameters() if p.requires_grad
                }
                reply = reply if rank == 0 else None
            elif op == "optimizer":
                reply = get_optimizer_state_dict(model, optimizer, options=full)
                reply = reply if rank == 0 else None
            elif op == "load":
                set_model_state_dict(model, msg[1], options=full)
                set_optimizer_state_dict(model, optimizer, msg[2], options=full)
                reply = None
            else:
                raise ValueError(f"unknown request {op!r}")
            _send(conn, ("ok", reply))
        except Exception:  # noqa: BLE001 - the driver reports it; the rank stays up to answer
            _send(conn, ("error", traceback.format_exc(limit=4)[-2000:]))


def _shard(model: Any, config: TrainerConfig, backend: str, rank: int) -> tuple[Any, Any]:
    """FSDP2 over the model: one unit per decoder layer, then the root; AdamW over the local shards."""
    from torch.distributed.fsdp import fully_shard

    if backend == "nccl":
        model = model.to(f"cuda:{rank}")
    for module in model.modules():
        if type(module).__name__.endswith("DecoderLayer"):
            fully_shard(module)
    fully_shard(model)
    params = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)


def _step(
    model: Any, optimizer: Any, spec: RankSpec, micro: list[list[TrainExample]], n_tokens: int, passes: int
) -> tuple[float, int]:
    """One optimizer step on this rank's micro-batches of a minibatch of `n_tokens` target tokens.

    Every rank runs `passes` forward/backward passes (an all-masked one when it has no micro-batch left),
    because FSDP's collectives must line up. FSDP averages gradients over ranks; the loss is scaled by the
    world size so that the result is the sum, as in one process.
    """
    import torch.distributed as dist

    world = dist.get_world_size()
    model.train()
    optimizer.zero_grad(set_to_none=True)
    filler = [TrainExample([spec.pad_id, spec.pad_id], [0, 0])]
    total, count = 0.0, 0
    for i in range(passes):
        batch = micro[i] if i < len(micro) else filler
        model.set_requires_gradient_sync(i == passes - 1)
        nll, tokens = token_nll(model, batch, spec.pad_id)
        (nll * world / n_tokens).backward()
        total += nll.item()
        count += tokens
    params = [p for p in model.parameters() if p.requires_grad]
    torch.nn.utils.clip_grad_norm_(params, spec.config.max_grad_norm)
    optimizer.step()
    return total, count
