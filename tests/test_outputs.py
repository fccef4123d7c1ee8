"""The registry of outputs (analysis/outputs.py): every report caption is one of its entries,
written from it unchanged, and each entry's builder and command id resolve."""

from pathlib import Path

from tapernorm.analysis import outputs
from tapernorm.artifact.report_captions import sync_captions
from tapernorm.cli import main

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
    assert stale.read_text() == outputs.BY_NAME["table1"].caption
    assert sync_captions(tmp_path, check=True) == []


def test_each_entry_names_its_builder_and_a_unique_command_id():
    for output in outputs.OUTPUTS:
        assert callable(output.build()), output.name
    for kind in ("table", "figure"):
        ids = outputs.cli_ids(kind)
        assert len(ids) == len(set(ids))
        assert all(outputs.by_cli_id(kind, i).kind == kind for i in ids)
