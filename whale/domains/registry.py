"""Find a domain by name: built-ins first, then packages registering the `whale.domains` entry point group."""

from __future__ import annotations

import importlib
import importlib.util
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from whale.core.config import ConfigError, DomainConfig
from whale.domains.base import Domain

DOMAIN_METHODS = ("splits", "seed_harness", "toolbox", "verify", "knob_pool")
BUILTIN = {
    "math": "whale.domains.math:MathDomain",
    "chess": "whale.domains.chess:ChessDomain",
    "searchqa": "whale.domains.searchqa.domain:SearchQADomain",
    "reasoning-gym": "whale.domains.gym:ReasoningGymDomain",  # needs the extra: pip install 'whale[gym]'
    "qa": "whale.domains.qa:QADomain",  # a user's own file: domain.options.path
}

# The control of issue 32: the shortest harness that answers in each built-in domain's format.
MINIMAL_SEEDS = {"math": "math", "chess": "chess", "searchqa": "searchqa", "reasoning-gym": "gym", "qa": "qa"}


def minimal_seed(name: str) -> str:
    """The built-in domain's minimal harness (whale/domains/harnesses/<name>_minimal.py)."""
    if name not in MINIMAL_SEEDS:
        raise ConfigError(f"domain.minimal_seed: only built-in domains have one ({', '.join(MINIMAL_SEEDS)})")
    return (Path(__file__).parent / "harnesses" / f"{MINIMAL_SEEDS[name]}_minimal.py").read_text("utf-8")


def available() -> dict[str, str]:
    """Domain name -> 'module:attribute' for every domain this installation can build."""
    found = dict(BUILTIN)
    for ep in entry_points(group="whale.domains"):
        found.setdefault(ep.name, ep.value)
    return found


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_domain_file(path: str) -> Any:
    """Import a user's one-file domain and return its `make_domain` factory."""
    source = Path(path)
    if not source.is_file():
        raise ConfigError(f"domain.file: file not found: {source}")
    spec = importlib.util.spec_from_file_location(f"whale_user_domain_{source.stem}", source)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure in the user's file is reported in one line
        raise ConfigError(f"domain.file {source}: import failed: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, "make_domain", None)
    if not callable(factory):
        raise ConfigError(f"domain.file {source}: defines no make_domain(seed, sizes, **options) function")
    return factory


def build_domain(cfg: DomainConfig, load: bool = True) -> Domain:
    """The configured domain; with `load`, its splits are built now, so a bad data file is a one-line
    ConfigError before anything runs rather than a traceback later."""
    if cfg.file:
        factory = load_domain_file(cfg.file)
        return _call(factory, cfg, load)
    targets = available()
    if cfg.name not in targets:
        names = ", ".join(sorted(targets))
        raise ConfigError(f"domain.name: unknown domain {cfg.name!r} (available: {names})")
    return _call(_load(targets[cfg.name]), cfg, load)


def _call(factory: Any, cfg: DomainConfig, load: bool) -> Domain:
    try:
        domain = factory(seed=cfg.seed, sizes=cfg.sizes, **cfg.options)
    except (TypeError, ValueError, OSError) as exc:
        raise ConfigError(f"domain {cfg.file or cfg.name}: {exc}") from None
    missing = [
        m for m in ("splits", "seed_harness", "toolbox", "verify", "knob_pool") if not hasattr(domain, m)
    ]
    if missing:
        raise ConfigError(
            f"domain {cfg.file or cfg.name}: missing {', '.join(missing)} (see docs/domains.md)"
        )
    if load:
        try:
            domain.splits()
        except (ValueError, OSError) as exc:
            raise ConfigError(f"domain {cfg.file or cfg.name}: {exc}") from None
    return domain
