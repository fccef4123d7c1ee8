"""Tables, figures and claims from run directories (see runs.py for what a run directory holds).

from tapernorm.analysis import load_runs, make_table, make_figure, write_claims
"""

from .claims import write_claims
from .figures import make_figure
from .runs import load_runs
from .tables import make_table

__all__ = ["load_runs", "make_figure", "make_table", "write_claims"]
