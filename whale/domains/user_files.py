"""A user's data files read as text: the encoding detected or named, and every decoding fault a
one-line FileError naming the file and line (a fault of the whole file, unlike a bad row, which the
loaders skip by name)."""

from __future__ import annotations

import io
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ENCODINGS_TRIED = ("utf-8-sig", "cp1252", "latin-1")  # "auto": the first that decodes the sample
SAMPLE_BYTES = 1 << 20


class FileError(ValueError):
    """A fault of the whole file (it cannot be read on), as opposed to one bad puzzle, which is skipped."""


def text_lines(path: str | Path, encoding: str = "auto") -> tuple[str, Iterator[str]]:
    """The encoding used and the file's lines. "auto" tries UTF-8 (with or without a BOM), then cp1252,
    then Latin-1 on the first MiB; a byte that the chosen encoding cannot decode later raises
    `path:line: not <encoding> text`."""
    with open(path, "rb") as f:
        sample = f.read(SAMPLE_BYTES)
    if encoding == "auto":
        whole = len(sample) < SAMPLE_BYTES
        encoding = next(e for e in ENCODINGS_TRIED if _decodes(sample, e, whole))
    else:
        try:
            "".encode(encoding)
        except LookupError:
            raise ValueError(f"{path}: unknown encoding {encoding!r}") from None
    return encoding, _decoded_lines(path, encoding)


def _decodes(sample: bytes, encoding: str, whole: bool) -> bool:
    try:
        sample.decode(encoding)
    except UnicodeDecodeError as e:  # a UTF-8 sequence cut by the end of a partial sample still counts
        return not whole and encoding == "utf-8-sig" and e.reason == "unexpected end of data"
    return True


def _decoded_lines(path: str | Path, encoding: str) -> Iterator[str]:
    """Decoded line by line from the bytes (so an error names its own line); wide encodings (UTF-16,
    UTF-32), whose line breaks are more than one byte, are decoded as a stream."""
    name = "UTF-8" if encoding.startswith("utf-8") else encoding
    with open(path, "rb") as f:
        wide = encoding.replace("_", "-").lower().startswith(("utf-16", "utf-32"))
        raw_lines = io.TextIOWrapper(f, encoding=encoding, newline="") if wide else f
        lineno = 0
        while True:
            try:
                raw = raw_lines.readline()
                line = raw if wide else raw.decode(encoding)
            except UnicodeDecodeError:
                raise FileError(
                    f"{path}:{lineno + 1}: not {name} text (set the chess option encoding, e.g. latin-1)"
                ) from None
            if not line:
                return
            lineno += 1
            yield line


SKIPS_SHOWN = 5  # skipped rows listed one by one on stderr; the summary counts them all


@dataclass
class Skips:
    """The rows a loader skipped, each `where: reason`, and a count per reason (the text before any
    ' (' or ':')."""

    lines: list[str] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)

    def add(self, where: str, reason: str) -> None:
        self.lines.append(f"{where}: {reason}")
        self.kinds[reason.split(" (")[0].split(":")[0]] += 1

    def summary(self, loaded: int) -> str:
        reasons = ", ".join(f"{kind} {n}" for kind, n in self.kinds.most_common())
        return f"loaded {loaded}, skipped {len(self.lines)}" + (f" ({reasons})" if reasons else "")

    def refuse_if_strict(self, strict: bool, loaded: int) -> None:
        if self.lines and strict:
            raise ValueError(f"{self.lines[0]} (strict: every row must load; {self.summary(loaded)})")

    def report(self, what: str, loaded: int, note: str = "") -> None:
        """`whale: <what> loaded N, skipped M (reasons)<note>` and the first skips, on stderr."""
        print(f"whale: {what} {self.summary(loaded)}{note}", file=sys.stderr)
        for line in self.lines[:SKIPS_SHOWN]:
            print(f"  skipped {line}", file=sys.stderr)
