"""The ClientApp: each SuperNode trains the adapters on its own partition."""
from rlxjax.flower import client_app

from .task import TASK, node_data

app = client_app(TASK, node_data, local_steps=5)
