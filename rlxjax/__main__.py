"""``python -m rlxjax``: the ``rlxjax`` command (rlxjax/cli.py)."""
import sys

from .cli import main

sys.exit(main())
