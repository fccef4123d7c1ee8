"""Documents -> uint16 tokens, EOT after each, in worker processes, written as they come.

    encode_to_file(docs, tokenizer, f, workers=4) -> Encoded(tokens, docs, lengths)

The documents are read in the calling process, cut into batches of about `batch_chars` characters
and tokenized by `workers` processes (in this process when workers=1); the batches' tokens are
written in document order. At most 2 x workers batches are in flight, so memory does not grow
with the corpus. A document's tokens do not depend on its batch or worker: any `workers` gives
the same bytes.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import BinaryIO, TypeVar

import numpy as np

from ..runtime.progress import Progress
from .tokenizers import Tokenizer, load_tokenizer

BATCH_CHARS = 1 << 21
BATCH_DOCS = 4096
IN_FLIGHT_PER_WORKER = 2

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


class TokenizingError(RuntimeError):
    """A tokenizing worker process died (most often: out of memory)."""


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a SLURM job's allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        return os.cpu_count() or 1


@dataclass
class Encoded:
    tokens: int  # written, EOTs included
    docs: int  # non-empty documents encoded
    lengths: np.ndarray | None  # each document's tokens with its EOT (int64), if asked for


def doc_batches(
    docs: Iterable[str], batch_chars: int | None = None, batch_docs: int = BATCH_DOCS
) -> Iterator[list[str]]:
    """The non-empty documents in batches of about `batch_chars` characters (default BATCH_CHARS)
    or `batch_docs` documents."""
    batch_chars = batch_chars or BATCH_CHARS
    batch: list[str] = []
    chars = 0
    for doc in docs:
        if not doc:
            continue
        batch.append(doc)
        chars += len(doc)
        if chars >= batch_chars or len(batch) >= batch_docs:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def encode_batch(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(uint16 tokens of the texts, each followed by EOT; int64 tokens per text with its EOT)."""
    encoded = tokenizer.encode_batch(texts, num_threads=1)
    lengths = np.fromiter((len(ids) + 1 for ids in encoded), dtype=np.int64, count=len(encoded))
    out = np.empty(int(lengths.sum()), dtype=np.uint16)
    pos = 0
    for ids in encoded:
        out[pos : pos + len(ids)] = ids
        out[pos + len(ids)] = tokenizer.eot_id
        pos += len(ids) + 1
    return out, lengths


_worker_tokenizers: dict[str, Tokenizer] = {}


def _encode_in_worker(spec: dict, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """encode_batch in a worker process, its tokenizer loaded from `spec` on first use (an error
    loading it reaches the caller as itself)."""
    key = repr(sorted(spec.items()))
    if key not in _worker_tokenizers:
        _worker_tokenizers[key] = load_tokenizer(spec)
    return encode_batch(_worker_tokenizers[key], texts)


def ordered_map(
    pool: Executor, fn: Callable[[T], R], items: Iterable[T], in_flight: int
) -> Iterator[R]:
    """fn over items on `pool`, results in the items' order, with at most `in_flight` submitted
    and not yet returned (Executor.map would read every item first)."""
    pending: deque = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= in_flight:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


def _process_pool(workers: int) -> ProcessPoolExecutor:
    # forkserver: workers fork from a clean server process, not from this one (which may hold
    # threads); spawn where there is no forkserver
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload([__name__])
    return ProcessPoolExecutor(workers, mp_context=context)


def encoded_batches(
    docs: Iterable[str],
    tokenizer: Tokenizer,
    workers: int = 1,
    batch_chars: int | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """encode_batch over the documents' batches, in order; `workers` > 1 tokenizes in that many
    processes, each loading the tokenizer from its meta() (a SentencePiece model by its file)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    batches = doc_batches(docs, batch_chars)
    if workers == 1:
        for texts in batches:
            yield encode_batch(tokenizer, texts)
        return
    encode = functools.partial(_encode_in_worker, tokenizer.meta())
    with _process_pool(workers) as pool:
        try:
            yield from ordered_map(pool, encode, batches, IN_FLIGHT_PER_WORKER * workers)
        except BrokenProcessPool as e:
            pool.shutdown(wait=True, cancel_futures=True)
            raise TokenizingError(
                f"a tokenizing process died ({e}): out of memory? Run with fewer --workers"
            ) from e
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def encode_to_file(
    docs: Iterable[str],
    tokenizer: Tokenizer,
    out: BinaryIO,
    workers: int = 1,
    keep_lengths: bool = False,
    batch_chars: int | None = None,
    desc: str | None = None,
) -> Encoded:
    """Write the non-empty documents' tokens, EOT after each, to `out` as uint16, in order; show
    the documents and tokens done as they go (tapernorm.runtime.progress), and log what was written and
    how fast (logger tapernorm.data.encoding, INFO)."""
    n_tokens = n_docs = 0
    lengths: list[np.ndarray] = []
    start = time.perf_counter()
    with Progress(f"encoding {desc}" if desc else "encoding", unit="doc") as progress:
        for tokens, doc_lengths in encoded_batches(docs, tokenizer, workers, batch_chars):
            out.write(tokens.tobytes())
            n_tokens += len(tokens)
            n_docs += len(doc_lengths)
            if keep_lengths:
                lengths.append(doc_lengths)
            progress.update(len(doc_lengths), tokens=len(tokens))
    seconds = time.perf_counter() - start
    log.info(
        "%s: %d documents, %d tokens in %.1f s with %d worker(s)",
        desc or "encoded",
        n_docs,
        n_tokens,
        seconds,
        workers,
    )
    kept = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    return Encoded(n_tokens, n_docs, kept if keep_lengths else None)
