"""tests/flower/: rlxjax.flower (needs the extra rlxjax[flower]; each file skips without
flwr). Its shared modules (fed_digits, inprocess) and the example App's package
(examples/flower/rlxjax_digits: the model the tests federate) import by plain name."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "flower")
sys.path.insert(0, HERE)
sys.path.insert(0, EXAMPLE)
