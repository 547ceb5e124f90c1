"""Reading a user's JSON and JSON-lines files: a bad file is one line naming it, what it should be, and the fix.

Never a bare codec or parser message ("'utf-8' codec can't decode byte 0xff",
"Not a gzipped file"), and never a whole JSON-lines file, or a whole line
longer than `MAX_LINE_BYTES`, in memory: a multi-GB file of one line is refused
after reading that many bytes of it.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The longest line a JSON-lines file may have (one example; the release's longest are well under 1 MB).
MAX_LINE_BYTES = 64 * 2**20


class JsonFileError(ValueError):
    """A JSON or JSON-lines file that cannot be read as such; the message names the file and the fix."""


def parse_json_text(data: bytes, where: str, what: str, fix: str) -> Any:
    """`data` (the bytes of `where`) parsed as JSON, or a `JsonFileError` saying it should be `what`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JsonFileError(
            f"{where} is not {what}: it is binary, not UTF-8 text (byte {data[err.start]:#04x} at offset "
            f"{err.start}); {fix}"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise JsonFileError(
            f"{where} is not {what}: not valid JSON ({err.msg}, line {err.lineno} column {err.colno}); {fix}"
        ) from None
    except RecursionError:
        raise JsonFileError(f"{where} is not {what}: JSON nested too deeply to read; {fix}") from None


def read_json_object(path: str | Path, what: str, fix: str) -> dict[str, Any]:
    """The JSON object in `path` (a file that should be `what`, e.g. "a model's config.json"), or one line."""
    path = Path(path)
    value = parse_json_text(path.read_bytes(), str(path), what, fix)
    if not isinstance(value, dict):
        raise JsonFileError(f"{path} is not {what}: it holds a JSON {type(value).__name__}, not an object; {fix}")
    return value


def _lines(path: Path, limit: int) -> Iterator[bytes]:
    """The lines of `path` (gunzipped when it ends in .gz), none longer than `limit` bytes held at once."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        number = 0
        while True:
            line = handle.readline(limit + 1)
            if not line:
                return
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                raise JsonFileError(
                    f"{path}:{number} is longer than {limit:,} bytes: a JSON-lines file holds one example a line "
                    "(is this one huge document, or not a JSON-lines file?); split it into one JSON object a line"
                )
            yield line


def json_lines(path: str | Path, fix: str) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of every non-blank line of `path`, gzipped when its name ends in .gz.

    Bounded memory: a line longer than `MAX_LINE_BYTES` is refused after that
    many bytes. `fix` ends each message (e.g. "fix or delete that line").
    """
    path = Path(path)
    try:
        for number, raw in enumerate(_lines(path, MAX_LINE_BYTES), start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise JsonFileError(
                    f"{path}:{number} is not UTF-8 text (byte {raw[err.start]:#04x} at column {err.start + 1}): "
                    f"not a JSON-lines file, or a damaged one; {fix}"
                ) from None
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                raise JsonFileError(
                    f"{path}:{number} is not valid JSON ({err.msg}, column {err.colno}): each line must be one "
                    f"JSON object; {fix}"
                ) from None
            except RecursionError:
                raise JsonFileError(f"{path}:{number} is JSON nested too deeply to read; {fix}") from None
    except gzip.BadGzipFile:
        raise JsonFileError(
            f"{path} is not a gzip file, though its name ends in .gz: gzip it, or drop the .gz from its name"
        ) from None
    except (EOFError, zlib.error) as err:
        raise JsonFileError(f"{path} is a truncated or damaged gzip file ({err}): copy or download it again") from None


def check_line_lengths(path: str | Path) -> None:
    """Refuse a JSON-lines file with a line longer than `MAX_LINE_BYTES`, streaming it (for readers such as
    `datasets`' json builder, which hold a whole line, however long, in memory)."""
    for _ in _lines(Path(path), MAX_LINE_BYTES):
        pass
