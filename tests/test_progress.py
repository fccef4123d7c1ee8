"""Progress of data preparation, evaluation and the benchmarks (tapernorm.runtime.progress): a bar on a
terminal, a plain log line now and then elsewhere, quiet for a short step, on stderr only, and
nothing it does reaches the numbers."""

from __future__ import annotations

import io
import logging

import pytest
import torch

from tapernorm.bench.timing import paired_rounds
from tapernorm.data import gpt2_tokenizer, load_shakespeare
from tapernorm.data.encoding import encode_to_file
from tapernorm.model import GPT, GPTConfig
from tapernorm.runtime import progress
from tapernorm.runtime.progress import Progress
from tapernorm.training.evaluation import mean_ce

LOGGER = "tapernorm.runtime.progress"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_line_now_and_then(caplog, capsys):
    with caplog.at_level(logging.INFO, LOGGER):
        with Progress("encoding train", total=4, unit="doc", every=0.0) as p:
            p.update(1, tokens=10)
            p.update(1, tokens=5)
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 2
    assert (
        lines[1].startswith("encoding train: 2/4 doc (") and ", 15 tokens, elapsed 0:00" in lines[1]
    )
    assert lines[1].endswith("ETA 0:00")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # (the logger's lines go where logging sends them)


def test_a_short_step_says_nothing(caplog, capsys):
    with caplog.at_level(logging.INFO, LOGGER):
        with Progress("eval", total=3, unit="batch") as p:  # every EVERY = 30 s
            for _ in range(3):
                p.update()
    assert [r for r in caplog.records if r.name == LOGGER] == []
    assert capsys.readouterr() == ("", "")


def test_a_bar_on_a_terminal_and_no_log_lines(monkeypatch, caplog):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with caplog.at_level(logging.INFO, LOGGER):
        with Progress("bench forward", total=5, unit="round", every=0.0) as p:
            for _ in range(5):
                p.update()
    assert "bench forward" in terminal.getvalue() and "5/5" in terminal.getvalue()
    assert [r for r in caplog.records if r.name == LOGGER] == []


def test_an_evaluation_shows_its_batches_and_scores_the_same(monkeypatch, caplog):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, n_layer=1, n_head=2, n_embd=16, block_size=8))
    x = torch.randint(0, 64, (10, 8))
    y = torch.randint(0, 64, (10, 8))
    quiet = mean_ce(model, x, y, batch_size=3)
    monkeypatch.setattr(progress, "EVERY", 0.0)
    with caplog.at_level(logging.INFO, LOGGER):
        shown = mean_ce(model, x, y, batch_size=3, label="eval heldout")
    assert shown == quiet  # to the bit
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert [line.split(" (")[0] for line in lines] == [
        f"eval heldout: {i}/4 batch" for i in (1, 2, 3, 4)
    ]


def test_encoding_shows_documents_and_tokens(monkeypatch, caplog):
    docs = load_shakespeare()[1][:5]
    monkeypatch.setattr(progress, "EVERY", 0.0)
    out = io.BytesIO()
    with caplog.at_level(logging.INFO, LOGGER):
        encoded = encode_to_file(docs, gpt2_tokenizer(), out, batch_chars=1, desc="val")
    last = [r.getMessage() for r in caplog.records if r.name == LOGGER][-1]
    assert last.startswith(f"encoding val: {encoded.docs} doc (")
    assert f", {encoded.tokens} tokens," in last and len(out.getvalue()) == 2 * encoded.tokens


@pytest.mark.parametrize(("rounds", "warmup"), [(3, 0), (2, 2)])
def test_benchmark_rounds_are_counted_between_timed_calls(rounds, warmup):
    events = []

    def run(name):
        def call():
            events.append(name)
            return {"s": 1.0}

        return call

    times = paired_rounds(
        {"a": run("a"), "b": run("b")}, rounds, warmup, on_round=lambda: events.append("|")
    )
    assert events.count("|") == rounds + warmup
    assert "".join(events).split("|")[:-1] == ["ab"] * warmup + ["ab", "ba", "ab"][:rounds]
    assert times == {"a": {"s": [1.0] * rounds}, "b": {"s": [1.0] * rounds}}
