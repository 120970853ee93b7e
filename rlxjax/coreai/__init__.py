"""The Core AI format (first slice): RLX graph -> a ``coreai`` dialect program (``.aimodel``).

format.py is the format object (rlxjax/formats/); lower.py lowers the RLX ops it knows
(elementwise, dot_general, reductions, shapes) and refuses every other op naming it and the
user's line; loaded.py reads a saved .aimodel back (checked before the runtime sees it);
ca_private.py is the only module that imports coreai-core; worker.py runs a
program on Apple's Core AI runtime in a worker process (the runtime kills the process on
some bad programs). Importing this package imports nothing.
"""
