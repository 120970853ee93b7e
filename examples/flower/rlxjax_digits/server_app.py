"""The ServerApp: FedAvg over the adapters, from the step's initial trainable leaves."""
import json

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from rlxjax import atomic
from rlxjax.flower.server import run_strategy

from .task import TASK

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    nodes = int(cfg["num-nodes"])  # FedAvg waits for this many SuperNodes
    out = run_strategy(TASK, FedAvg(min_available_nodes=nodes, min_train_nodes=nodes,
                                    min_evaluate_nodes=nodes), grid,
                       num_rounds=int(cfg["num-server-rounds"]),
                       train_config={"local-steps": int(cfg["local-steps"])})
    if cfg.get("result-path"):
        evaluate = out.result.evaluate_metrics_clientapp
        atomic.write_bytes(cfg["result-path"], json.dumps({
            "rounds": sorted(out.bytes),
            "bytes": {r: vars(b) for r, b in out.bytes.items()},
            "accuracy": {r: float(m["accuracy"]) for r, m in evaluate.items()},
            "nodes": nodes,
        }).encode())
