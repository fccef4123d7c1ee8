"""Tables, figures and claims from run directories (runs.py says what a run directory holds).

Modules: runs (load_runs), stats (Table 2's outlier rule), paper (the published numbers), tables
(make_table), figures (make_figure), claims (write_claims), cli (add_subcommands). Nothing is imported
here, so `tapernorm` commands that don't draw anything never load matplotlib.
"""
