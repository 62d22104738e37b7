"""A user's question-answer file as rows: JSONL, CSV, Parquet, or a folder written by Hugging Face
`datasets.save_to_disk`. Each row comes with where it is (`path:line`, or `path:row N` for columnar
files) so that a bad one can be skipped by name; a file that cannot be read at all raises one line.
Parquet and dataset folders need pyarrow (pip install 'whale[data]')."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from whale.domains.user_files import FileError, text_lines

Row = tuple[str, dict[str, Any] | str]  # (where, the row) or (where, why it could not be read)


def read_rows(path: str | Path, encoding: str = "auto") -> tuple[str, Iterator[Row]]:
    """The file's kind and its rows."""
    path = Path(path)
    if path.is_dir():
        return "dataset folder", _dataset_folder(path)
    if not path.is_file():
        raise FileError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl", _jsonl(path, encoding)
    if suffix in (".csv", ".tsv"):
        return "csv", _csv(path, encoding, "\t" if suffix == ".tsv" else ",")
    if suffix == ".parquet":
        return "parquet", _columnar(path, _parquet_table(path))
    raise FileError(
        f"{path}: unknown format {suffix or '(no suffix)'} (expected .jsonl, .csv, .parquet or a folder)"
    )


def _jsonl(path: Path, encoding: str) -> Iterator[Row]:
    _, lines = text_lines(path, encoding)
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            yield where, f"invalid JSON ({str(exc).splitlines()[0][:100]})"
            continue
        yield (
            (where, row)
            if isinstance(row, dict)
            else (where, f"expected a JSON object, got {type(row).__name__}")
        )


def _csv(path: Path, encoding: str, delimiter: str) -> Iterator[Row]:
    _, lines = text_lines(path, encoding)
    reader = csv.reader(
        (line.lstrip("\ufeff") if i == 0 else line for i, line in enumerate(lines)), delimiter=delimiter
    )
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise FileError(f"{path}:1: malformed CSV ({exc})") from None
    if not header:
        raise FileError(f"{path}:1: no header row")
    while True:
        try:
            cells = next(reader, None)
        except csv.Error as exc:
            raise FileError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
        if cells is None:
            return
        where = f"{path}:{reader.line_num}"
        if not "".join(cells).strip():
            continue
        if len(cells) != len(header):
            yield where, f"expected {len(header)} columns, got {len(cells)}"
            continue
        yield where, dict(zip(header, cells, strict=True))


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise FileError("Parquet files and dataset folders need pyarrow: pip install 'whale[data]'") from None
    return pyarrow


def _parquet_table(path: Path) -> Any:
    _pyarrow()
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow's many error types: the file is not Parquet
        raise FileError(
            f"{path}: not a readable Parquet file ({type(exc).__name__}: {str(exc)[:120]})"
        ) from None


def _dataset_folder(folder: Path) -> Iterator[Row]:
    """A `datasets.save_to_disk` folder: state.json names its Arrow stream files, read in order."""
    pa = _pyarrow()
    state = folder / "state.json"
    if not state.is_file():
        raise FileError(
            f"{folder}: not a dataset folder (no state.json; for a DatasetDict, name one split's folder)"
        )
    try:
        files = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (ValueError, KeyError, TypeError):
        raise FileError(f"{state}: unreadable (expected _data_files, as datasets writes it)") from None
    for name in files:
        try:
            with pa.memory_map(str(folder / name)) as source:
                table = pa.ipc.open_stream(source).read_all()
        except Exception as exc:  # noqa: BLE001 - pyarrow's many error types: the file is not Arrow
            raise FileError(f"{folder / name}: not an Arrow stream ({type(exc).__name__})") from None
        yield from _columnar(folder / name, table)


def _columnar(path: Path, table: Any) -> Iterator[Row]:
    for i, row in enumerate(table.to_pylist(), start=1):
        yield f"{path}:row {i}", row
