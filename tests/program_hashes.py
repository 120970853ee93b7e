"""Hash every ML Program the suite makes, to show that a refactoring changes no program.

With ``RLXJAX_PROGRAM_HASHES=<folder>`` set, each test's programs are hashed where they are
used - loaded by the reference interpreter, validated by coremltools' loader, or written as
a package - and one line per program (test id, sequence number, where, sha256 of the model
protobuf serialised deterministically and of its weight files) is appended to
``<folder>/<worker>.tsv``. Compare two runs with::

    python tests/program_hashes.py BEFORE_FOLDER AFTER_FOLDER

Paths in the metadata (source locations) are hashed relative to the checkout, so two
checkouts compare. Run both with ``-p no:randomly --hypothesis-seed=0`` and the hypothesis profile this module
registers (``derandomize``, no example database), so that the same tests make the same
programs.
"""
from __future__ import annotations

import collections
import hashlib
import os
import re
import sys

FOLDER = os.environ.get("RLXJAX_PROGRAM_HASHES")


#: paths that differ between two checkouts or runs but not between their programs: the
#: repository root and pytest's temporary folders, as they appear in source locations the
#: metadata names ('lax.top_k at /work/x/tests/...py:3')
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TMP = re.compile(r"/tmp/pytest-of-[^/]+/pytest-\d+/")


def _normalised(model):
    meta = model.description.metadata.userDefined
    if not any(_ROOT in v or "/tmp/pytest-of-" in v for v in meta.values()):
        return model
    copy = type(model)()
    copy.CopyFrom(model)
    for k, v in list(copy.description.metadata.userDefined.items()):
        copy.description.metadata.userDefined[k] = _TMP.sub("<tmp>/", v.replace(_ROOT, "<root>/"))
    return copy


def program_hash(model, weights_dir) -> str:
    h = hashlib.sha256(_normalised(model).SerializeToString(deterministic=True))
    if weights_dir and os.path.isdir(weights_dir):
        for name in sorted(os.listdir(weights_dir)):
            path = os.path.join(weights_dir, name)
            if os.path.isfile(path):
                h.update(name.encode())
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
    return h.hexdigest()


class Recorder:
    def __init__(self, folder):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        os.makedirs(folder, exist_ok=True)
        self.file = open(os.path.join(folder, f"{worker}.tsv"), "a")
        self.test, self.n = "<collection>", 0

    def record(self, where, model, weights_dir):
        try:
            digest = program_hash(model, weights_dir)
        except Exception as e:  # noqa: BLE001 - a malformed program a test feeds on purpose
            digest = f"unhashable:{type(e).__name__}"
        self.file.write(f"{self.test}\t{self.n}\t{where}\t{digest}\n")
        self.file.flush()
        self.n += 1


def install():
    """Wrap the three places a program is used (called once, from conftest)."""
    from rlxjax.coreml import ct_private
    from rlxjax.coreml.interpreter.interpreter import ReferenceProgram

    rec = Recorder(FOLDER)
    init = ReferenceProgram.__init__

    def ref_init(self, model, weights_dir=None, *, function="main"):
        rec.record(f"run:{function}", model, weights_dir)
        return init(self, model, weights_dir, function=function)

    load, create = ct_private._load_milproto, ct_private._create_mlpackage

    def load_milproto(model, version, weights_dir):
        rec.record("validate", model, weights_dir)
        return load(model, version, weights_dir)

    def create_mlpackage(model, weights_dir, path):
        rec.record("save", model, weights_dir)
        return create(model, weights_dir, path)

    ReferenceProgram.__init__ = ref_init
    ct_private._load_milproto = load_milproto
    ct_private._create_mlpackage = create_mlpackage
    return rec


def compare(before: str, after: str) -> int:
    def read(folder):
        runs = collections.defaultdict(list)
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name)) as f:
                for line in f:
                    test, n, where, digest = line.rstrip("\n").split("\t")
                    runs[test].append((int(n), where, digest))
        return {t: [r[1:] for r in sorted(v)] for t, v in runs.items()}

    a, b = read(before), read(after)
    common = sorted(set(a) & set(b))
    differ = [t for t in common if a[t] != b[t]]
    n_prog = sum(len(a[t]) for t in common)
    print(f"{len(common)} tests in both runs, {n_prog} programs; "
          f"{len(set(a) - set(b))} only before, {len(set(b) - set(a))} only after; "
          f"{len(differ)} tests whose programs differ")
    for t in differ[:int(os.environ.get("SHOW", 50))]:
        print("  differs:", t)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(compare(sys.argv[1], sys.argv[2]))
