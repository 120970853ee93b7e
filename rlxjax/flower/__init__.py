"""Federated fine-tuning on Flower: many devices train one model, no data leaves a device.

Optional extra: ``pip install "rlxjax[flower]"`` (Flower 1.42, its Simulation Engine and
flwr-datasets). ``import rlxjax`` never imports this package; importing it without Flower
is a BackendUnavailableError naming the extra.

* ``task.py``    ``Task``: what the server and every node share (the train step, the
                 initial parameters, the evaluation function) and the per-process runtime
* ``arrays.py``  trainable leaves <-> Flower ``ArrayRecord`` (names = pytree paths, as
                 ``step.export_params`` writes them); optimizer state in ``Context.state``
* ``client.py``  ``client_app``: a Flower ``ClientApp`` that trains through the compiled step
* ``server.py``  ``server_app``: a Flower ``ServerApp`` running any Flower strategy from the
                 step's initial trainable leaves, counting the bytes each round moves
* ``secagg.py``  the SecAgg+ workflow (Flower's legacy message layout) with the same client
* ``data.py``    non-IID partitions of in-memory data with flwr-datasets' partitioners

The message contract (what an iOS client must speak) is in the documentation site,
docs/reference/federated.md ("Federated fine-tuning on Flower").
"""
from ._flwr import require

require()

from .arrays import record_bytes, to_arrays, from_arrays  # noqa: E402
from .task import NodeData, Task, partition_of  # noqa: E402
from .client import client_app  # noqa: E402
from .server import FederatedResult, server_app  # noqa: E402
from .secagg import secaggplus_server_app  # noqa: E402
from .data import dirichlet_partitions  # noqa: E402

__all__ = ["Task", "NodeData", "partition_of", "client_app", "server_app",
           "secaggplus_server_app", "FederatedResult", "to_arrays", "from_arrays",
           "record_bytes", "dirichlet_partitions"]
