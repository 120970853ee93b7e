"""coreai-torch's program of the decode step of ``llm_cache.py``'s decoder: the same weights
(a ``.npz`` of the flax tree's leaves by path), the same maths, written in torch, its KV
cache in registered buffers updated in place (``index_copy_``), which coreai-torch makes
Core AI states. The position is an input (coreai-torch keeps no integer counter state).

Runs in the separate torch environment (``/work/.venv-torch``: CPU torch + coreai-torch
0.4.3; torch is not installed beside rlxjax):

    /work/.venv-torch/bin/python bench/decode_torch.py WEIGHTS.npz SHAPE.json OUT.aimodel

prints a JSON line: the conversion seconds and the state names.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


class Decode(torch.nn.Module):
    def __init__(self, w, s, ctx):
        super().__init__()
        self.s, self.ctx = s, ctx
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        self.embed = torch.nn.Parameter(t(w["params/embed/embedding"]), requires_grad=False)
        self.final = torch.nn.Parameter(t(w["params/final_norm/scale"]), requires_grad=False)
        names = ("attn_norm/scale", "q/kernel", "k/kernel", "v/kernel", "o/kernel",
                 "mlp_norm/scale", "gate/kernel", "up/kernel", "down/kernel")
        self.layers = torch.nn.ModuleList()
        for i in range(s["layers"]):
            m = torch.nn.Module()
            for n in names:
                a = w[f"params/layer{i}/{n}"]
                # torch's Linear stores [out, in]: the kernel transposed, as a converter's
                # user writes it
                a = a.T if a.ndim == 2 else a
                m.register_parameter(n.replace("/", "_"),
                                     torch.nn.Parameter(t(a), requires_grad=False))
            self.layers.append(m)
            z = torch.zeros(s["kv_heads"], ctx, s["hd"])
            self.register_buffer(f"k{i}", z.clone())
            self.register_buffer(f"v{i}", z.clone())
        hd = s["hd"]
        inv = 1.0 / (s["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
        ang = np.arange(ctx, dtype=np.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", t(np.concatenate([np.cos(ang)] * 2, -1).astype(np.float32)))
        self.register_buffer("sin", t(np.concatenate([np.sin(ang)] * 2, -1).astype(np.float32)))
        self.register_buffer("positions", torch.arange(ctx, dtype=torch.int32))

    def _norm(self, x, w):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.s["eps"]) * w

    @staticmethod
    def _rope(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    def forward(self, tok, pos):
        s = self.s
        g, rep, hd = s["kv_heads"], s["heads"] // s["kv_heads"], s["hd"]
        x = self.embed[tok[0]]                                      # [1, d]
        cos, sin = self.cos[pos], self.sin[pos]                     # [1, hd]
        mask = (self.positions <= pos)[None, None, :]               # [1, 1, ctx]
        for i, m in enumerate(self.layers):
            h = self._norm(x, m.attn_norm_scale)
            q = torch.nn.functional.linear(h, m.q_kernel).reshape(g, rep, hd)
            k = torch.nn.functional.linear(h, m.k_kernel).reshape(g, 1, hd)
            v = torch.nn.functional.linear(h, m.v_kernel).reshape(g, 1, hd)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            kc, vc = getattr(self, f"k{i}"), getattr(self, f"v{i}")
            kc.index_copy_(1, pos, k)
            vc.index_copy_(1, pos, v)
            att = torch.einsum("grd,gkd->grk", q, kc) / float(np.sqrt(hd))
            att = torch.where(mask, att, torch.tensor(-1e9))
            y = torch.einsum("grk,gkd->grd", torch.softmax(att, -1), vc)
            x = x + torch.nn.functional.linear(y.reshape(1, s["heads"] * hd), m.o_kernel)
            h = self._norm(x, m.mlp_norm_scale)
            a = torch.nn.functional.silu(torch.nn.functional.linear(h, m.gate_kernel))
            x = x + torch.nn.functional.linear(a * torch.nn.functional.linear(h, m.up_kernel),
                                               m.down_kernel)
        return torch.nn.functional.linear(self._norm(x, self.final), self.embed)


def main(weights, shape_json, out):
    import coreai_torch

    s = json.loads(Path(shape_json).read_text())
    w = dict(np.load(weights))
    module = Decode(w, s, s["ctx"]).eval()
    sample = (torch.zeros((1, 1), dtype=torch.int32), torch.zeros((1,), dtype=torch.int32))
    t0 = time.perf_counter()
    conv = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
    conv.add_pytorch_module(
        module, input_names=["tok", "pos"], output_names=["logits"],
        export_fn=lambda m: torch.export.export(m, args=sample).run_decompositions(
            coreai_torch.get_decomp_table()))
    program = conv.to_coreai()
    program.save_asset(Path(out))
    print(json.dumps({"convert_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
