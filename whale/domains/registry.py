"""Build a domain from config by name."""

from __future__ import annotations

from whale.config import DomainConfig
from whale.domains.base import Domain


def build_domain(cfg: DomainConfig) -> Domain:
    if cfg.name == "math":
        from whale.domains.math import MathDomain

        return MathDomain(seed=cfg.seed, sizes=cfg.sizes, levels=cfg.levels or None)
    raise ValueError(f"unknown domain {cfg.name!r}")
