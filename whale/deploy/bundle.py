"""Agent bundles: one agent version of a run as a self-contained folder that can be checked before use.

    <bundle>/manifest.json  version, scores, config, package versions, sha256 of every other file
    <bundle>/README.md      what the agent is and how to run it
    <bundle>/harness.py     the harness
    <bundle>/domain.json    the domain (its tools) and options; domain.py holds a user's domain file
    <bundle>/data/          copies of the files the domain options name (a puzzle file, a dataset)
    <bundle>/scores.json    per-task rewards on val and test at the version's evaluation point
    <bundle>/model/         merged weights and tokenizer (transformers save_pretrained, safetensors), or
    <bundle>/adapter/       the LoRA adapter (peft) over the base model the manifest names (`--adapter`)

Export builds the bundle in a temporary sibling folder and renames it into place, so a failed export
leaves nothing. Every load checks every file against the manifest first and refuses, in one line naming
the file, one that was changed, removed or added. The hashes catch corruption and edits; they are not a
signature (whoever can rewrite the files can rewrite the manifest).
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import time
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from whale.core.config import Config, ConfigError, config_from_dict
from whale.core.files import atomic_build_folder, atomic_write_json, atomic_write_text, read_json
from whale.core.stats import rewards_by_task
from whale.deploy.versions import AgentVersion
from whale.run.rundir import RunDir

FORMAT = "whale-agent-bundle/1"
MANIFEST = "manifest.json"
PACKAGES = ("whale", "torch", "transformers", "peft", "safetensors")


class BundleError(ConfigError):
    """A bundle that is not one, or was modified after export: one line naming the file."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_files(folder: Path) -> list[str]:
    """Every file in the bundle except the manifest, as sorted relative POSIX paths (bytecode caches,
    which importing a bundled domain.py may write, are not part of it)."""
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if (p.is_file() or p.is_symlink()) and p.name != MANIFEST and "__pycache__" not in p.parts
    )


def data_files(options: dict[str, Any]) -> dict[str, tuple[Path, str]]:
    """The domain options that name a file (a puzzle file, a dataset): each is copied into the bundle's
    data/ folder and the option pointed there on load, so a bundle works wherever it is moved."""
    found = {}
    for key, value in options.items():
        if isinstance(value, str) and value and Path(value).is_file():
            found[key] = (Path(value), f"data/{key}{Path(value).suffix}")
    return found


def package_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = package_version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


# ---- export ---------------------------------------------------------------------------------------------


def run_config(run: Path) -> Config:
    """The run's config with the engine it ran on (its start event resolves `engine.kind=auto`), so that a
    bundle answers on the engine behind the run's evaluations, whatever the loading machine would pick."""
    cfg, started = RunDir(run).load_config(), RunDir(run).started_config() or {}
    if "engine" not in started:
        return cfg
    return cfg.model_copy(update={"engine": type(cfg.engine).model_validate(started["engine"])})


def _write_weights(tmp: Path, cfg: Config, checkpoint: Path | None, adapter: bool) -> str:
    """Write the version's weights into `tmp`; returns the weights format: merged, adapter or base."""
    from safetensors import SafetensorError

    from whale.model.distributed import trainer_config
    from whale.model.loading import load_model
    from whale.model.trainer import load_trainable, with_lora

    if checkpoint is None and adapter:
        return "base"  # the base model itself: nothing to store beyond its reference
    model, tokenizer = load_model(cfg.model.name, cfg.seed)
    if checkpoint is not None:
        if cfg.weights.lora:
            model = with_lora(model, trainer_config(cfg.weights))
        try:
            load_trainable(model, checkpoint)
        except (SafetensorError, ValueError, OSError) as exc:
            raise ConfigError(f"{checkpoint}: cannot load its weights ({str(exc).splitlines()[0]})") from None
        if adapter:
            model.save_pretrained(str(tmp / "adapter"), safe_serialization=True)
            return "adapter"
        if cfg.weights.lora:
            model = model.merge_and_unload()
    model.save_pretrained(str(tmp / "model"), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp / "model"))
    return "merged"


def _per_task_rewards(run: Path, point: int) -> dict[str, dict[str, list[float]]]:
    rows = {split: RunDir(run).eval_rows(point, split) for split in ("val", "test")}
    return {
        split: rewards_by_task((r["task_id"], r["reward"]) for r in split_rows)
        for split, split_rows in rows.items()
    }


def _readme(manifest: dict[str, Any], example: str) -> str:
    v, t = manifest["scores"]["val"], manifest["scores"]["test"]
    k = t["k"]
    weights = {
        "merged": "`model/`: the fine-tuned weights merged into the base model, with its tokenizer",
        "adapter": f"`adapter/`: a LoRA adapter over the base model `{manifest['base_model']['name']}`",
        "base": f"no weights: the base model `{manifest['base_model']['name']}` unchanged",
    }[manifest["weights_format"]]
    return f"""# whale agent {manifest["agent"]}

Weights `{manifest["weights"]}` with harness `{manifest["harness"]}`, from evaluation point
{manifest["point"]} ({manifest["label"]}) of the run `{manifest["run"]}`, exported {manifest["exported"]}.

| split | mean@{k} | 95% CI | tasks |
|---|---|---|---|
| val | {v["mean"]:.3f} | [{v["ci_low"]:.3f}, {v["ci_high"]:.3f}] | {v["n_tasks"]} |
| test | {t["mean"]:.3f} | [{t["ci_low"]:.3f}, {t["ci_high"]:.3f}] | {t["n_tasks"]} |

## Contents

- {weights}
- `harness.py`: the harness (runs in whale's sandbox workers, as in training)
- `domain.json`: domain `{manifest["domain"]["name"]}` and its options (the tools the harness gets)
- `scores.json`: per-task rewards on val and test at that point (`whale diff` pairs them)
- `manifest.json`: versions, scores, the run's config, package versions and the sha256 of every file;
  every load checks them and refuses a bundle that was changed

## Run it

Task inputs are a JSON object with the fields the `{manifest["domain"]["name"]}` domain gives its tasks;
a task of the domain can also be named by id (it then gets a reward).

```bash
whale agent BUNDLE --input '{{...task inputs...}}'     # one task from the shell
whale agent BUNDLE --task {example}
whale serve BUNDLE --port 8000                        # POST /run, GET /health on 127.0.0.1
```

```python
import whale
agent = whale.load_agent("BUNDLE")
result = agent({{...task inputs...}})     # result.answer, result.trace
```

Sampling follows the run's config (temperature {manifest["config"]["sampling"]["temperature"]}); pass
`--temperature 0` (or `load_agent(..., temperature=0)`) for greedy answers. The agent answers on the
engine the run ran on ({manifest["config"]["engine"]["kind"]}); `--engine fast` (or `load_agent(...,
engine="fast")`) answers without vLLM's start-up, from samples that can differ from the run's.
"""


def export_bundle(run: Path, version: AgentVersion, out: Path, adapter: bool = False) -> dict[str, Any]:
    """Write `version` of `run` as a bundle at `out` (which must not exist); returns its manifest."""
    if out.exists():
        raise ConfigError(f"--out {out}: already exists (a bundle is written to a new folder)")
    cfg = run_config(run)
    if adapter and not cfg.weights.lora and version.checkpoint:
        raise ConfigError(f"--adapter: {run} fine-tuned every weight (weights.lora is false); export merged")
    domain = cfg.domain.model_dump(include={"name", "seed", "sizes", "options"})
    domain["file"] = "domain.py" if cfg.domain.file else None
    data = data_files(cfg.domain.options)
    domain["data"] = {key: rel for key, (_, rel) in data.items()}
    domain["options"] = {**domain["options"], **domain["data"]}  # relative to the bundle
    if cfg.domain.file and not Path(cfg.domain.file).is_file():
        raise ConfigError(f"{run}: its domain file {cfg.domain.file} is gone; it belongs in the bundle")
    base = cfg.model.name
    base = str(Path(base).resolve()) if base not in ("tiny", "embedded") else base
    checkpoint = RunDir(run).checkpoint(version.checkpoint) if version.checkpoint else None

    def build(tmp: Path) -> None:
        shutil.copyfile(RunDir(run).harness_file(version.harness), tmp / "harness.py")
        if cfg.domain.file:
            shutil.copyfile(cfg.domain.file, tmp / "domain.py")
        for source, rel in data.values():
            (tmp / rel).parent.mkdir(exist_ok=True)
            shutil.copyfile(source, tmp / rel)
        atomic_write_json(tmp / "domain.json", domain)
        scores = _per_task_rewards(run, version.point)
        atomic_write_json(tmp / "scores.json", scores)
        manifest = {
            "format": FORMAT,
            "agent": version.id,
            "weights": version.weights,
            "harness": version.harness,
            "checkpoint": version.checkpoint,
            "point": version.point,
            "label": version.label,
            "phase": version.phase,
            "rollouts": version.rollouts,
            "run": str(run.resolve()),
            "exported": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "weights_format": _write_weights(tmp, cfg, checkpoint, adapter),
            "base_model": {"name": base, "seed": cfg.seed},
            "scores": {"val": version.val, "test": version.test},
            "domain": domain,
            "config": cfg.model_dump(),
            "packages": package_versions(),
        }
        atomic_write_text(tmp / "README.md", _readme(manifest, next(iter(scores["test"]), "TASK_ID")))
        manifest["files"] = {name: sha256_file(tmp / name) for name in bundle_files(tmp)}
        atomic_write_json(tmp / MANIFEST, manifest)

    atomic_build_folder(out, build)
    return read_json(out / MANIFEST)


# ---- load -----------------------------------------------------------------------------------------------


def verify_bundle(folder: Path) -> dict[str, Any]:
    """The bundle's manifest, once every file matches it; otherwise BundleError naming the first file that
    does not (changed, missing, added, or a symbolic link)."""
    path = folder / MANIFEST
    if not path.is_file():
        raise BundleError(f"{folder}: not a whale agent bundle (no {MANIFEST})")
    try:
        manifest = read_json(path)
    except (ValueError, UnicodeDecodeError):
        raise BundleError(f"{path}: not valid JSON (the bundle is damaged)") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: not a {FORMAT} manifest")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BundleError(f"{path}: lists no files")
    present = set(bundle_files(folder))
    for name, digest in files.items():
        target = folder / name
        if name not in present:
            raise BundleError(f"{target}: missing (listed in {MANIFEST})")
        if target.is_symlink():
            raise BundleError(f"{target}: a symbolic link; a bundle holds plain files only")
        if sha256_file(target) != digest:
            raise BundleError(
                f"{target}: sha256 differs from {MANIFEST}: the bundle was modified after export"
            )
    extra = sorted(present - set(files))
    if extra:
        raise BundleError(f"{folder / extra[0]}: not part of the exported bundle (not in {MANIFEST})")
    return manifest


ENGINES = ("auto", "fast", "hf", "vllm")  # what a bundle may answer on instead of its run's engine


def bundle_config(
    folder: Path, manifest: dict[str, Any], temperature: float | None = None, engine: str | None = None
) -> Config:
    """The run's config, pointed at the bundle's own files (domain file; no seed-harness path). `engine`
    replaces the run's engine kind: a one-shot answer need not pay vLLM's start-up."""
    if engine is not None and engine not in ENGINES:
        raise ConfigError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    data = json.loads(json.dumps(manifest["config"]))
    data["domain"]["harness"] = None
    data["domain"]["file"] = str(folder / "domain.py") if manifest["domain"]["file"] else None
    for key, rel in (manifest["domain"].get("data") or {}).items():
        data["domain"]["options"][key] = str(folder / rel)
    if temperature is not None:
        data["sampling"]["temperature"] = temperature
    if engine is not None:
        data["engine"]["kind"] = engine
    return config_from_dict(data, f"{folder / MANIFEST} (config)")


def load_bundle_model(folder: Path, manifest: dict[str, Any]) -> tuple[Any, Any]:
    """(model, tokenizer) of a verified bundle; an adapter stays unmerged, exactly as the run served it."""
    from whale.model.loading import load_model

    kind = manifest["weights_format"]
    if kind == "merged":
        return load_model(str(folder / "model"))
    base = manifest["base_model"]
    model, tokenizer = load_model(base["name"], base["seed"])
    if kind == "adapter":
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(folder / "adapter"))
    return model, tokenizer
