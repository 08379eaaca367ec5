"""The `dispatcher` command's entry point: as light as an import can be.

dispatcher.cli.main imports every command and the service layer (a
fraction of a second); a Ctrl-C in that time would be a KeyboardInterrupt
traceback from deep inside an import. Here it is the same one line and
exit status 130 as a Ctrl-C anywhere else before a command takes over.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from dispatcher.cli.main import main as run
    except KeyboardInterrupt:
        sys.stderr.write("dispatcher: interrupted\n")
        sys.exit(130)
    run()
