"""The studies beyond one pipeline run, each read from its committed records: scaling (with
scaling_io and scaling_figures), stability (and stability_factors), lr_grid (and lr_context, where
a study's runs sit on the grid), anchor_sweep (the scale loss's dose-response), tails (the tails
battery side by side) and gpu_report (a first GPU check's tables, figure 5 and GPU-hours)."""
