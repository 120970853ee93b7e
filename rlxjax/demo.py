"""The README's main job: train a small digits classifier through its compiled ML Program
(``coreml_train_step`` with optax adam), side by side with the same JAX + optax loop, then
export the trained model for inference.

The data set is generated here, deterministically (scikit-learn is not a dependency): ten
8×8 stroke templates, one per digit, each sample shifted by up to a pixel, with random
stroke intensity and pixel noise.
"""
from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

_TEMPLATES = [
    # 0
    ["..####..", ".#....#.", ".#....#.", ".#....#.", ".#....#.", ".#....#.", ".#....#.",
     "..####.."],
    # 1
    ["...##...", "..###...", "...##...", "...##...", "...##...", "...##...", "...##...",
     "..####.."],
    # 2
    ["..####..", ".#....#.", "......#.", ".....#..", "....#...", "...#....", "..#.....",
     ".######."],
    # 3
    ["..####..", ".#....#.", "......#.", "...###..", "......#.", "......#.", ".#....#.",
     "..####.."],
    # 4
    ["....##..", "...#.#..", "..#..#..", ".#...#..", ".######.", ".....#..", ".....#..",
     ".....#.."],
    # 5
    [".######.", ".#......", ".#......", ".#####..", "......#.", "......#.", ".#....#.",
     "..####.."],
    # 6
    ["..####..", ".#......", ".#......", ".#####..", ".#....#.", ".#....#.", ".#....#.",
     "..####.."],
    # 7
    [".######.", "......#.", ".....#..", "....#...", "...#....", "...#....", "...#....",
     "...#...."],
    # 8
    ["..####..", ".#....#.", ".#....#.", "..####..", ".#....#.", ".#....#.", ".#....#.",
     "..####.."],
    # 9
    ["..####..", ".#....#.", ".#....#.", "..#####.", "......#.", "......#.", ".....#..",
     "..###..."],
]

N_SAMPLES, N_TRAIN, BATCH, HIDDEN, N_CLASSES = 1000, 800, 100, 32, 10
LEARNING_RATE = 1e-2
DEFAULT_STEPS = 200
LOSS_RTOL = 1e-3


def make_digits(n: int = N_SAMPLES, seed: int = 0):
    """Deterministic synthetic 8×8 digits: (x float32 [n, 64] in [0, 1], labels int [n])."""
    rng = np.random.default_rng(seed)
    templates = np.array([[[c == "#" for c in row] for row in t] for t in _TEMPLATES],
                         np.float32)
    labels = np.arange(n) % N_CLASSES
    rng.shuffle(labels)
    xs = np.empty((n, 8, 8), np.float32)
    for i, lab in enumerate(labels):
        img = np.pad(templates[lab], 1)                   # 10×10, then crop a shifted 8×8
        dy, dx = rng.integers(0, 3, size=2)
        img = img[dy:dy + 8, dx:dx + 8] * rng.uniform(0.6, 1.0)
        xs[i] = np.clip(img + rng.normal(0.0, 0.25, img.shape), 0.0, 1.0)
    return xs.reshape(n, 64), labels


def init_params(key, d_in=64, d_hidden=HIDDEN, d_out=N_CLASSES):
    k1, k2 = jax.random.split(key)
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    return {
        "ln": {"scale": f32(np.ones(d_in)), "bias": f32(np.zeros(d_in))},
        "dense_0": {"kernel": f32(jax.random.normal(k1, (d_in, d_hidden)) / np.sqrt(d_in)),
                    "bias": f32(np.zeros(d_hidden))},
        "dense_1": {"kernel": f32(jax.random.normal(k2, (d_hidden, d_out)) / np.sqrt(d_hidden)),
                    "bias": f32(np.zeros(d_out))},
    }


def logits_fn(params, x):
    """LayerNorm -> Dense -> gelu -> Dense, in plain jax.numpy (plus rlxjax's LN primitive)."""
    from .nn import layer_norm

    h = layer_norm(x, params["ln"]["scale"], params["ln"]["bias"])
    h = jax.nn.gelu(h @ params["dense_0"]["kernel"] + params["dense_0"]["bias"])
    return h @ params["dense_1"]["kernel"] + params["dense_1"]["bias"]


def loss_fn(params, x, y_onehot):
    """Mean softmax cross-entropy."""
    return -jnp.mean(jnp.sum(y_onehot * jax.nn.log_softmax(logits_fn(params, x)), axis=-1))


def predict(params, x):
    """What the exported app model computes: class probabilities."""
    return jax.nn.softmax(logits_fn(params, x))


def jax_loop(params, opt, batches, steps):
    import optax

    @jax.jit
    def step(p, s, x, y):
        l, g = jax.value_and_grad(loss_fn)(p, x, y)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, l

    p, s, losses = params, opt.init(params), []
    for i in range(steps):
        p, s, l = step(p, s, *batches[i % len(batches)])
        losses.append(float(l))
    return p, losses


def coreai_available() -> str:
    """'' when the Core AI extra is installed, else why not (rlxjax[coreai])."""
    import importlib.metadata

    try:
        importlib.metadata.version("coreai-core")
    except importlib.metadata.PackageNotFoundError:
        return 'coreai-core is not installed: pip install "rlxjax[coreai]"'
    return ""


def _coreai_run(params, opt, batches, steps, out_dir, progress, x_te):
    """The same training on Apple's Core AI runtime: an .aimodel with train_step and
    predict, parameters and adam state in Core AI states (fp32 as they are); then, as an
    app would, the saved asset loaded with the exported state predicts the held-out set."""
    from .load import load
    from .training import coreml_train_step

    step = coreml_train_step(loss_fn, opt, state="mlstate", format="aimodel")
    state = step.init(params)
    t0 = time.perf_counter()
    state, losses = step.fit(state, batches, steps=steps, progress=progress)
    wall = time.perf_counter() - t0
    path = step.save(os.path.join(out_dir, "train_step.aimodel"),
                     predict=(predict, batches[0][0][:1]))
    n_ops = sum(op.type != "constant" for op in step.last_compiled.executable.operations())
    folder = step.export_state(state, os.path.join(out_dir, "train_step.aimodel.state"))
    app = load(path, flat=True)
    states = app.make_state(folder)
    probs = np.concatenate([app.run("predict", x=x_te[i:i + 1], state=states)["out"]
                            for i in range(len(x_te))])
    return {"losses": losses, "path": path, "wall_s": wall, "ops": n_ops, "probs": probs,
            "state_folder": folder}


def _figure(plt, rlx_losses, jax_losses, coreai_losses=None, accuracy=None):
    """The loss curves and, beside them, the held-out accuracy of each run."""
    runs = [("JAX + optax", jax_losses, dict(linewidth=3, alpha=0.5)),
            ("rlxjax ML Program (reference backend)", rlx_losses, dict(linewidth=1))]
    if coreai_losses is not None:
        runs.append(("rlxjax .aimodel on Apple's Core AI runtime", coreai_losses,
                     dict(linewidth=1, linestyle="--")))
    if accuracy:
        fig, (ax, acc) = plt.subplots(1, 2, figsize=(10, 4),
                                      gridspec_kw={"width_ratios": [2, 1]})
    else:
        fig, ax = plt.subplots(figsize=(6, 4))
    for label, losses, style in runs:
        ax.plot(losses, label=label, **style)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_yscale("log")
    ax.set_title("training loss")
    ax.legend()
    title = f"digits classifier: final loss {rlx_losses[-1]:.4g} (JAX {jax_losses[-1]:.4g})"
    if accuracy:
        names = list(accuracy)
        bars = acc.bar(range(len(names)), [accuracy[n] for n in names],
                       color=["C0", "C1", "C2"][:len(names)])
        acc.set_xticks(range(len(names)), names)
        acc.set_ylim(0, 1.1)
        acc.set_ylabel("held-out accuracy")
        acc.set_title("held-out accuracy")
        for b, n in zip(bars, names):
            acc.annotate(f"{accuracy[n]:.1%}", (b.get_x() + b.get_width() / 2, accuracy[n]),
                         ha="center", va="bottom")
        title += "\nheld-out accuracy " + ", ".join(f"{n} {a:.1%}" for n, a in accuracy.items())
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def _plot(path, rlx_losses, jax_losses, coreai_losses=None, accuracy=None):
    """Write the loss curves, titled, with the held-out ``accuracy`` ({run: fraction})
    beside them; matplotlib is optional. Returns (path or None, reason)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # ImportError, or a broken install
        return None, f"matplotlib is not importable ({type(e).__name__}: {e})"
    fig = _figure(plt, rlx_losses, jax_losses, coreai_losses, accuracy)
    fig.savefig(path)
    plt.close(fig)
    return path, ""


def run(out_dir: str = "out", steps: int = DEFAULT_STEPS, target: str = "iOS17",
        backend=None, progress: bool = True, coreai: bool = True) -> dict:
    """Train, compare with JAX, export. Returns a report; ``report["ok"]`` is False when
    rlxjax's final loss differs from JAX's by more than ``LOSS_RTOL`` (relative)."""
    import optax

    from .formats.backends import resolve_backend
    from .training import coreml_train_step, export_inference

    t_start = time.perf_counter()
    backend_name = resolve_backend(backend)
    os.makedirs(out_dir, exist_ok=True)
    x, labels = make_digits()
    onehot = np.eye(N_CLASSES, dtype=np.float32)[labels]
    x_tr, y_tr, x_te, lab_te = x[:N_TRAIN], onehot[:N_TRAIN], x[N_TRAIN:], labels[N_TRAIN:]
    batches = [(x_tr[i:i + BATCH], y_tr[i:i + BATCH]) for i in range(0, N_TRAIN, BATCH)]
    print(f"data: {N_SAMPLES} synthetic 8x8 'digits' generated in code (10 stroke templates, "
          f"random 1-pixel shifts, intensity and noise; no scikit-learn needed): "
          f"{N_TRAIN} to train in batches of {BATCH}, {N_SAMPLES - N_TRAIN} held out")
    print(f"model: LayerNorm(64) -> Dense(64->{HIDDEN}) -> gelu -> Dense({HIDDEN}->10), "
          f"softmax cross-entropy, optax.adam({LEARNING_RATE}), {steps} steps")

    params = init_params(jax.random.PRNGKey(0))
    opt = optax.adam(LEARNING_RATE)
    step = coreml_train_step(loss_fn, opt, target=target, backend=backend)
    state = step.init(params, *batches[0])  # compiles for the batch shapes: save works now
    print(f"training through the compiled ML Program ({target}, backend: {backend_name})")
    t0 = time.perf_counter()
    state, rlx_losses = step.fit(state, batches, steps=steps, progress=progress)
    t_rlx = time.perf_counter() - t0
    train_path = step.save(os.path.join(out_dir, "train_step.mlpackage"))

    t0 = time.perf_counter()
    jax_params, jax_losses = jax_loop(params, opt, batches, steps)
    t_jax = time.perf_counter() - t0

    trained = step.params(state)
    digits_path = os.path.abspath(os.path.join(out_dir, "digits.mlpackage"))
    infer = export_inference(predict, trained, x_te[:1], target=target, backend=backend,
                             path=digits_path)
    probs = np.concatenate([infer(x_te[i:i + 1]) for i in range(len(x_te))])
    acc_rlx = float(np.mean(np.argmax(probs, -1) == lab_te))
    acc_jax = float(np.mean(np.argmax(np.asarray(jax.jit(predict)(jax_params, x_te)), -1)
                            == lab_te))

    ai, why_not = None, coreai_available() if coreai else "not asked for"
    if not why_not:
        print("training the same step as a Core AI program (.aimodel, state='mlstate') on "
              "Apple's Core AI runtime (coreai-core)")
        ai = _coreai_run(params, opt, batches, steps, out_dir, progress, x_te)
        ai["acc"] = float(np.mean(np.argmax(ai["probs"], -1) == lab_te))

    l_rlx, l_jax = rlx_losses[-1], jax_losses[-1]
    rel = abs(l_rlx - l_jax) / max(abs(l_jax), 1e-30)
    n_ops = sum(op.type != "const" for op in step.last_compiled.mil_ops())
    print(f"rlxjax (ML Program, {backend_name}): final loss {l_rlx:.6f}  held-out accuracy "
          f"{acc_rlx:.1%}  ({t_rlx:.1f}s, {n_ops} MIL ops per step)")
    print(f"JAX + optax                 : final loss {l_jax:.6f}  held-out accuracy "
          f"{acc_jax:.1%}  ({t_jax:.1f}s)")
    if ai is not None:
        l_ai = ai["losses"][-1]
        rel_ai = abs(l_ai - l_jax) / max(abs(l_jax), 1e-30)
        print(f"rlxjax (.aimodel, Core AI)   : final loss {l_ai:.6f}  held-out accuracy "
              f"{ai['acc']:.1%}  ({ai['wall_s']:.1f}s, {ai['ops']} Core AI ops per step, on "
              "Apple's Core AI runtime)")
        rel = max(rel, rel_ai)
    else:
        print(f"Core AI run skipped: {why_not}")
    ok = rel <= LOSS_RTOL
    print(f"JAX parity: final losses differ by {rel:.2e} relative at most (tolerance "
          f"{LOSS_RTOL:g}): " + ("OK" if ok else "FAILED"))
    print(f"saved {train_path}  (the training program: params + adam state + batch in, "
          "loss + new params + new state out)")
    print(f"saved {digits_path}  "
          "(the trained classifier: one image x [1, 64] in, 10 class probabilities out)")
    if ai is not None:
        print(f"saved {ai['path']}  (the Core AI program: train_step and predict over one set "
              f"of Core AI states; their trained values in {ai['state_folder']}, which the "
              "held-out accuracy above was predicted from by the loaded asset)")
    accuracy = {"JAX": acc_jax, "ML Program": acc_rlx}
    if ai is not None:
        accuracy["Core AI"] = ai["acc"]
    plot, why = _plot(os.path.join(out_dir, "loss.png"), rlx_losses, jax_losses,
                      None if ai is None else ai["losses"], accuracy)
    print(f"saved {os.path.abspath(plot)}  (loss curves)" if plot else
          f"loss plot skipped: {why}; pip install matplotlib to get {out_dir}/loss.png")
    wall = time.perf_counter() - t_start
    print(f"demo {'OK' if ok else 'FAILED'} in {wall:.1f}s")
    sys.stdout.flush()
    return {"ok": ok, "loss_rlxjax": l_rlx, "loss_jax": l_jax, "rel_diff": rel,
            "acc_rlxjax": acc_rlx, "acc_jax": acc_jax, "train_path": train_path,
            "digits_path": digits_path,
            "plot": plot, "wall_s": wall, "losses_rlxjax": rlx_losses,
            "losses_jax": jax_losses,
            "losses_coreai": None if ai is None else ai["losses"]}
