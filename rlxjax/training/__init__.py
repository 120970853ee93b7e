"""Training steps: forward, backward and an optax update compiled into one ML Program.

* ``layout.py``     the typed layout of a training program (each feature's role, what feeds what)
* ``pipeline.py``   a step's compile, stage by stage: trace, train graph, states, format,
  layout, metadata (``compile_train``: a ``TrainProgram``)
* ``program.py``    building the training graph (``build_train_graph``)
* ``state="mlstate"``: the state codecs (exact fp32 storage in Core ML fp16 states) are
  format-neutral, in rlxjax/states/
* ``state.py``      ``TrainState`` and the device state between steps
* ``options.py``    ``coreml_train_step``: checks its options, picks the step class
* ``step.py``       ``TrainStep``: the host runtime (init, step, fit)
* ``checkpoint.py`` checkpoints and ``export_state`` files (written through rlxjax/atomic.py)
* ``progress.py``   the progress bar of ``fit`` (tqdm)
* ``multifunction.py`` ``step.save(path, predict=...)``: train_step + predict in one package
* ``params_io.py``  ``export_params`` / ``load_params``: parameters as safetensors
* ``export.py``     ``export_inference`` (``compressed_export.py``: with ``compress=``)
* ``trainable.py``  ``trainable=`` / ``compress=``: a masked subset trained on a frozen base
* ``frozen.py``     the frozen / trainable split and the baking of frozen leaves as weights
* ``mixed_precision.py`` ``precision="mixed"``: fp16 forward/backward, fp32 state, loss scaling
"""
from .export import export_inference
from .mixed_precision import DynamicLossScale, MixedState
from .state import TrainState
from .options import coreml_train_step
from .step import TrainStep

__all__ = ["coreml_train_step", "TrainStep", "TrainState", "export_inference",
           "DynamicLossScale", "MixedState"]
