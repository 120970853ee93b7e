"""tests/flower/: rlxjax.flower (needs the extra rlxjax[flower]; each file skips without
flwr). Its shared modules (fed_digits, inprocess) import by plain name."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
