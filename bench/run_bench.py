"""Run the whale benchmark without the CLI: `python bench/run_bench.py --model embedded --out bench/results`.

Same as `whale bench` (whale.bench.suite.run_bench); see bench/README.md and docs/performance.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from whale.bench.suite import run_bench  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="embedded (SmolLM2-135M), tiny, or a folder")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="folder for bench.json")
    parser.add_argument("--quick", action="store_true", help="small sizes (under a minute with --model tiny)")
    args = parser.parse_args()
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    run_bench(args.model, args.out, args.quick, console)


if __name__ == "__main__":
    main()
