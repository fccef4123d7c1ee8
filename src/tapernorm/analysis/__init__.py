"""Tables, figures and claims from run directories (runs.py says what a run directory holds).

Modules: runs (load_runs), stats (Table 2's outlier rule), paper (the published numbers), tables
(make_table), figures (make_figure), inference_tables (Table 3, the decode table), figure_speedups
(fig5), anchor_sweep (table_anchor, fig7), finetune (Tables 4 and 6), claims (write_claims; the
claims themselves in claim_rows, claims_loss, claims_chasing, claims_fold, claims_finetune and
claims_dyt), scaling, scaling_io and scaling_figures (the scaling study), lr_grid (the LR grid's
summary), gpu_report (a first GPU check's tables, figure 5 and GPU-hours), job_times (Snakemake's
job records per rule). The commands are tapernorm.cli.analysis'. Nothing is imported here, so
`tapernorm` commands that don't draw anything never load matplotlib.
"""
