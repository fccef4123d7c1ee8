"""The registry of outputs (workflow/outputs.py): every report caption is one of its entries,
written from it unchanged, each entry's builder and command id resolve, `tapernorm make NAME` is
the output's own command (the rule each entry names is the workflow's: tests/test_workflow.py)."""

from pathlib import Path

import pytest

from tapernorm.analysis import builder
from tapernorm.artifact.report_captions import sync_captions
from tapernorm.cli import main
from tapernorm.workflow import outputs

ROOT = Path(__file__).resolve().parents[1]


def test_every_report_caption_is_a_registered_output():
    files = {p.name for p in (ROOT / outputs.REPORT_DIR).glob("*.rst")}
    registered = {Path(o.caption_path()).name for o in outputs.OUTPUTS}
    assert files - registered == set(outputs.NOT_OUTPUTS)
    assert registered <= files and len(outputs.BY_NAME) == len(outputs.OUTPUTS)


def test_the_committed_captions_are_what_the_registry_writes():
    assert sync_captions(ROOT, check=True) == []


def test_a_stale_caption_is_reported_and_rewritten(tmp_path, capsys):
    (tmp_path / outputs.REPORT_DIR).mkdir(parents=True)
    stale = tmp_path / outputs.BY_NAME["table1"].caption_path()
    stale.write_text("typed by hand\n")
    assert main(["docs", "--check", "--repo", str(tmp_path)]) == 1
    assert f"{stale}: report caption differ" in capsys.readouterr().out
    assert main(["docs", "--repo", str(tmp_path)]) == 0
    assert stale.read_text() == outputs.BY_NAME["table1"].report_caption()
    assert sync_captions(tmp_path, check=True) == []


def test_each_entry_names_its_builder_and_a_unique_command_id():
    for output in outputs.OUTPUTS:
        assert callable(builder(output)), output.name
    for kind in ("table", "figure"):
        ids = outputs.cli_ids(kind)
        assert len(ids) == len(set(ids))
        assert all(outputs.by_cli_id(kind, i).kind == kind for i in ids)


@pytest.mark.parametrize("output", outputs.OUTPUTS, ids=lambda o: o.name)
def test_make_name_is_the_outputs_own_command(output, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["make", output.name, "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: tapernorm {output.argv()[0]} ")


def test_make_refuses_a_name_that_is_not_an_output(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["make", "table9"])
    assert stop.value.code == 2
    assert "invalid choice: 'table9'" in capsys.readouterr().err


def test_make_parsed_without_main_runs_the_outputs_command(tmp_path):
    from tapernorm.cli import build_parser

    args = build_parser().parse_args(["make", "table3", "--out", str(tmp_path / "t3")])
    # main expands `make` before parsing; a program calling its func gets the same command
    with pytest.raises(ValueError, match="table 3 needs --bench"):
        args.func(args)
