"""States, format-neutral: state codecs, and the state files an app starts from.

The codecs say how fp32 / int32 leaves live in a format's states; ``files.py`` writes and
reads ``export_state``'s folder.

Used by training steps with ``state="mlstate"`` (rlxjax/training/) and by stateful
functions (``coreml_jit(fn, state=...)``, rlxjax/stateful.py) alike; a format's registry
entry names its codec (``state_codec``).

* ``mlstate.py``       the layout (which leaf lives where in the packed state vectors), the
  codecs' in-graph pack / unpack, the host's
* ``mlstate_codec.py`` the codecs (``CODECS``): Core ML's exact three fp16 pieces, fp16,
  Core AI's plain fp32 / int32
* ``mlstate_np.py``    the host side of the codecs in numpy
* ``mlstate_graph.py`` the graph rewrite: argument leaves become state reads and writes
* ``files.py``         ``export_state``'s folder of state files, and the reader a loaded
  package's ``make_state(folder)`` fills its states with
"""
