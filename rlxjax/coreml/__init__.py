"""The Core ML format: RLX graph -> MIL protobuf (``.mlpackage``), per op family in rules/.

``format.py`` is the format object the rest of rlxjax talks to (rlxjax/formats/); importing
this package imports nothing (``targets.py`` resolves target names without coremltools).
"""
