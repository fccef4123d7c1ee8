"""Documents streamed from files, one at a time, so that no corpus is ever held in memory whole.

txt_documents    a .txt file: documents separated by lines holding only <|endoftext|>
jsonl_texts      .jsonl files: the text field of each record, parsed a block at a time by pyarrow
arrow_texts      the text column of Arrow record batches (a `datasets` Dataset, streamed or not)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..runtime.jsonio import FileError

# A separator line and the blank lines around it (the whole-file split of a .txt copy).
EOT_LINE = re.compile(r"^\s*<\|endoftext\|>\s*$", flags=re.MULTILINE)
_NON_SPACE = re.compile(r"\S")
READ_BYTES = 1 << 24  # a .txt file is read this many bytes at a time
JSONL_BLOCK_BYTES = 1 << 24  # .jsonl: pyarrow parses blocks of this size


def _utf8_pieces(path: Path, read_bytes: int) -> Iterator[str]:
    """The UTF-8 text of `path` in pieces of whole lines (the last one may lack its newline);
    FileError naming the file, line and column of a byte that is not UTF-8, as
    jsonio.read_text does for a whole file."""
    line = 1  # the line the next piece starts on
    pending = b""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise FileError(f"{path} does not exist") from None
    with f:
        while True:
            block = f.read(read_bytes)
            data = pending + block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            if block and cut == 0:  # no newline yet: a long line; read on
                pending = data
                continue
            piece, pending = data[:cut], data[cut:]
            try:
                yield piece.decode("utf-8")
            except UnicodeDecodeError as e:
                at = line + piece.count(b"\n", 0, e.start)
                column = e.start - (piece.rfind(b"\n", 0, e.start) + 1) + 1
                raise FileError(
                    f"{path}: not UTF-8 text (byte 0x{piece[e.start]:02x} at line {at}, column "
                    f"{column}: {e.reason})"
                ) from None
            line += piece.count(b"\n")
            if not block:
                return


def txt_documents(path: str | Path, read_bytes: int | None = None) -> Iterator[str]:
    """The documents of a .txt file: the parts between separator lines (<|endoftext|> alone on its
    line), newlines stripped at both ends, blank parts dropped. Read in blocks of whole lines: the
    same documents as splitting the whole text with EOT_LINE, holding one block at a time.

    A separator is taken only once text follows it in the buffer (its trailing blank lines are part
    of the match); until then it stays in the carried remainder and is matched again with more
    text, so a block boundary never changes where a document starts or ends.
    """
    buffer = ""
    for piece in _utf8_pieces(Path(path), read_bytes or READ_BYTES):
        buffer = buffer + piece if buffer else piece
        start = 0
        for m in EOT_LINE.finditer(buffer):
            if _NON_SPACE.search(buffer, m.end()) is None:
                break  # only whitespace after it so far: more blank lines may belong to it
            yield from _document(buffer[start : m.start()])
            start = m.end()
        buffer = buffer[start:]
    for part in EOT_LINE.split(buffer):
        yield from _document(part)


def _document(part: str) -> Iterator[str]:
    if part.strip():
        yield part.strip("\n")


def jsonl_texts(
    files: Sequence[Path], text_field: str, max_rows: int | None = None, source: str = "dataset"
) -> Iterator[str]:
    """The non-empty `text_field` values of JSON-lines files, in order, from the first `max_rows`
    records (or all): the values `datasets`' json loader reads (pyarrow's JSON parser, which it
    uses too), at pyarrow's speed (`datasets` streams JSON row by row, some 20 times slower). The
    other fields are not parsed."""
    import pyarrow as pa
    import pyarrow.json as pj

    parse = pj.ParseOptions(
        explicit_schema=pa.schema([(text_field, pa.string())]), unexpected_field_behavior="ignore"
    )
    read = pj.ReadOptions(block_size=JSONL_BLOCK_BYTES)

    def batches() -> Iterator:
        for path in files:
            first = _first_record(path)
            if first is None:
                continue
            if text_field not in first:
                raise ValueError(f"{source} has no column '{text_field}' (columns: {list(first)})")
            yield from pj.open_json(path, read_options=read, parse_options=parse)

    return arrow_texts(batches(), text_field, max_rows, source)


def _first_record(path: Path) -> dict | None:
    """The first record of a JSON-lines file (None if it has none)."""
    import json

    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                try:
                    record = json.loads(line)
                except ValueError as e:
                    raise ValueError(f"{path}: line 1 is not JSON ({e})") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{path}: a record is {type(record).__name__}, not an object")
                return record
    return None


def arrow_texts(
    batches: Iterable, text_field: str, max_rows: int | None = None, source: str = "dataset"
) -> Iterator[str]:
    """The non-empty values of the `text_field` column of Arrow tables or record batches, in
    order, from the first `max_rows` rows (or all). `source` (its files) is named in the errors:
    no such column, or a value that is not UTF-8 (with its record number)."""
    row = 0
    for batch in batches:
        if max_rows is not None and row >= max_rows:
            return
        if text_field not in batch.column_names:
            raise ValueError(
                f"{source} has no column '{text_field}' (columns: {batch.column_names})"
            )
        column = batch.column(text_field)
        if max_rows is not None:
            column = column.slice(0, max_rows - row)
        try:
            values = column.to_pylist()
        except UnicodeDecodeError as e:
            bad = next(i for i in range(len(column)) if not _decodes(column[i]))
            raise ValueError(
                f"{source}: record {row + bad + 1} (its '{text_field}') is not UTF-8 text "
                f"({e.reason} at byte {e.start}); fix or drop that record"
            ) from None
        row += len(column)
        yield from (t for t in values if t)


def _decodes(value) -> bool:
    try:
        value.as_py()
    except UnicodeDecodeError:
        return False
    return True
