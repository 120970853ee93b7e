"""coreai-torch's program of coreai_speed.py's CNN forward (for vs_coreai_torch.py).

The same weights (a ``.npz`` of the flax tree's leaves by path), the same function, written
in torch as a torch user would (NCHW convolutions; the input given NHWC as the flax model takes it, permuted once;
JAX's SAME padding of the stride-2 conv, (0, 1), as an explicit ``F.pad``; the dense
layer's rows reordered to the NCHW flatten instead of permuting the activations back).

Runs in the separate torch environment (``/work/.venv-torch``: CPU torch + coreai-torch
0.4.3; torch is not installed beside rlxjax):

    /work/.venv-torch/bin/python bench/cnn_torch.py WEIGHTS.npz BATCH OUT.aimodel

prints a JSON line: the conversion seconds, coreai-torch's and torch's versions and the
program's text.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


class CNN(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        t = lambda a: torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(a)),  # noqa: E731
                                         requires_grad=False)
        # flax: Conv kernels HWIO, Dense kernel [in, out] over the NHWC flatten
        self.k1 = t(w["params/Conv_0/kernel"].transpose(3, 2, 0, 1))
        self.b1 = t(w["params/Conv_0/bias"])
        self.k2 = t(w["params/Conv_1/kernel"].transpose(3, 2, 0, 1))
        self.b2 = t(w["params/Conv_1/bias"])
        d = w["params/Dense_0/kernel"]  # [14*14*64 (h, w, c), 10]
        c = self.k2.shape[0]
        hw = int(round((d.shape[0] // c) ** 0.5))
        self.fc = t(d.reshape(hw, hw, c, -1).transpose(3, 2, 0, 1).reshape(d.shape[1], -1))
        self.fcb = t(w["params/Dense_0/bias"])

    def forward(self, x):
        x = x.permute(0, 3, 1, 2)
        x = F.relu(F.conv2d(x, self.k1, self.b1, padding=1))
        x = F.relu(F.conv2d(F.pad(x, (0, 1, 0, 1)), self.k2, self.b2, stride=2))
        return F.linear(x.flatten(1), self.fc, self.fcb)


def main(weights, batch, out):
    import coreai_torch

    w = dict(np.load(weights))
    module = CNN(w).eval()
    x = torch.zeros(int(batch), 28, 28, 1)
    t0 = time.perf_counter()
    conv = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
    conv.add_pytorch_module(
        module, input_names=["x"], output_names=["y"],
        export_fn=lambda m: torch.export.export(m, args=(x,)).run_decompositions(
            coreai_torch.get_decomp_table()))
    program = conv.to_coreai()
    program.save_asset(Path(out))
    secs = time.perf_counter() - t0
    print(json.dumps({"convert_s": secs, "coreai_torch": coreai_torch.__version__,
                      "torch": torch.__version__, "text": str(program)}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
