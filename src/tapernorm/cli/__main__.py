"""`python -m tapernorm.cli`: the `tapernorm` command."""

import sys

from . import main

sys.exit(main())
