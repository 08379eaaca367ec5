"""The harness's two failures, each reported as one line by the CLI (harness.py).

    Exception
    ├── BenchError   an operational failure: exit 1
    └── UsageError   bad arguments: exit 2

Owns nothing else; imports nothing.
"""


class BenchError(Exception):
    """An operational failure: reported as one line, exit 1."""


class UsageError(Exception):
    """Bad arguments: reported as one line, exit 2."""
