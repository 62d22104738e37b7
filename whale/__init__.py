"""whale: Weight-Harness Alternating LEarning.

Kept import-light on purpose: every sandbox worker start imports it (twice: the launcher, then the
worker), so it imports neither torch nor typing.
"""

from __future__ import annotations

from os import PathLike

TYPE_CHECKING = False
if TYPE_CHECKING:
    from whale.deploy.agent import Agent

__version__ = "0.1.0"


def load_agent(
    folder: str | PathLike[str], temperature: float | None = None, engine: str | None = None
) -> Agent:
    """Load an exported agent bundle (`whale export`): `load_agent(dir)(task_inputs)` returns the answer
    and the trace. See whale.deploy.agent."""
    from whale.deploy.agent import load_agent as load

    return load(folder, temperature, engine)
