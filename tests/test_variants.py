"""The one registry of variants (tapernorm.variants): well formed, and the lists every family,
benchmark, table and figure uses are read from it."""

import pytest

from tapernorm.analysis.studies import scaling
from tapernorm.analysis.tables import inference as inference_tables
from tapernorm.bench import variants as bench_variants
from tapernorm.variants import PAPER_VARIANTS, PROTOCOLS, VARIANTS, baseline_of, variants_with
from tapernorm.workflow import bench as workflow_bench
from tapernorm.workflow import plan

TRAINING = {"taper", "anchor", "label", "norm", "model", "against"}
ROLES = {"paper", "gap_claim", "fig2", "bench"}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_says_how_it_trains_and_only_known_roles(name):
    spec = VARIANTS[name]
    assert {"taper", "anchor", "label"} <= spec.keys() <= TRAINING | ROLES
    assert spec["taper"] in ("none", "internal", "final", "all")
    assert spec.get("against", "baseline") in VARIANTS
    if "bench" in spec:
        assert spec["bench"].keys() == {"option", "columns", "timed"}
        assert spec["bench"]["timed"] in ("always", "if_trained")


def test_protocols_say_how_they_train():
    for spec in PROTOCOLS.values():
        assert {"taper", "anchor", "label"} <= spec.keys() <= TRAINING


def test_the_lists_are_the_registrys():
    assert PAPER_VARIANTS == ("baseline", "internal", "internal_aux", "final", "all", "all_aux")
    assert set(plan.FIG2_VARIANTS) == set(variants_with("fig2"))
    assert workflow_bench.BENCH_VARIANTS == ("baseline", "internal_aux")
    assert workflow_bench.BENCH_OPTIONAL == ("dyt",)
    assert dict(workflow_bench.BENCH_MODEL_OPTIONS) == {
        "baseline": "baseline",
        "tapered": "internal_aux",
        "dyt": "dyt",
    }
    assert inference_tables.CELL_VARIANTS == ("baseline", "explicit", "folded")
    assert inference_tables.OPTIONAL_VARIANTS == ("dyt",)
    assert bench_variants.TAPERED_COLUMNS == ("explicit", "folded")
    assert scaling.GAP_CLAIMS == {
        "1": ("internal_aux", "baseline"),
        "2": ("all_aux", "baseline"),
        "dyt": ("dyt", "baseline_untied"),
    }


def test_variants_with_reads_the_registry_as_it_is(monkeypatch):
    monkeypatch.setitem(VARIANTS, "final", {**VARIANTS["final"], "fig2": True})
    assert "final" in variants_with("fig2")
    assert baseline_of("final") == "baseline" and baseline_of("baseline") is None
