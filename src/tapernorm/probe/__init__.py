"""The tails probe: how a model's loss and residual stream behave off the clean validation data
(noisy, rare, unseen, repeated and shifted windows, and the input a bounded search finds worst),
against a reference model, with a verdict (`tapernorm probe`).

    from tapernorm.probe import probe_models, format_report
    result = probe_models(model, reference, TokenShards("data/pretrain"), reference_gate=1.0)
    print(format_report(result, "model", "the model at g = 1"))

  stats.py    mean, quantiles, max, the fraction of windows above twice the clean median
  windows.py  the battery's inputs from token shards (noise, rare and unseen ids, repeats, shifts)
  measure.py  one forward pass: per-window loss, residual RMS per position and per block
  search.py   the bounded search for the input that most inflates the residual stream
  battery.py  the battery of one model (run_battery) on shared inputs (battery_inputs)
  verdict.py  two models' batteries and the thresholds (probe_models, judge, Thresholds)
  report.py   the result as text and as model card entries
"""

from .battery import BatteryInputs, BatterySettings, battery_inputs, run_battery
from .report import card_entries, format_report
from .search import SearchSettings, search_residual
from .verdict import Thresholds, judge, probe_models

__all__ = [
    "BatteryInputs",
    "BatterySettings",
    "SearchSettings",
    "Thresholds",
    "battery_inputs",
    "card_entries",
    "format_report",
    "judge",
    "probe_models",
    "run_battery",
    "search_residual",
]
