"""`python -m benchmarks [fast] [options]`: the same harness as `dispatcher bench`."""

import sys

from .harness import cli

sys.exit(cli())
