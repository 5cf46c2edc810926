"""``python -m speccheck.cli ...``: the same as ``speccheck ...``."""

import sys

from speccheck.cli.main import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
