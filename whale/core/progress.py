"""Progress bars for sampling, training and evaluation (rich; quiet when output is not a terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

# How a phase step shows progress without knowing the console: `bars(label, total)` opens a bar and yields
# a callback that advances it by one (functools.partial(track, console) is one).
Bars = Callable[[str, int], AbstractContextManager[Callable[..., None]]]


class RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:5.1f}/s" if task.speed else "  ?  /s")


@contextmanager
def track(console: Console, description: str, total: int) -> Iterator[Callable[..., None]]:
    """Yield a callback that advances a bar by one per call (pass it as a runner's on_done). `total` is
    the expected count; work that runs past it (a race's extension) raises the total with it."""
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(description, total=total)

        def tick(*_: object) -> None:
            bar.advance(task)
            done = bar.tasks[0].completed
            if done > (bar.tasks[0].total or 0):
                bar.update(task, total=done)

        yield tick
