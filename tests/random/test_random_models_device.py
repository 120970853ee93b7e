"""Issue 17's six-model suite (test_random_models.py), ``random="device"`` column.

Core ML draws its own numbers, so JAX's numbers are no oracle; per model:

- **compiles**: the ``value_and_grad`` program passes coremltools' MIL loader, and the saved
  ``.mlpackage`` holds exactly the Core ML random ops the model's draws call for (nn.RNN
  without a carry: none - its only randomness is dead);
- **differentiates**: (a) an identity that holds for every draw: with the reference
  backend's draws re-seeded (``seed_fresh_draws``) the same draws repeat, so the central
  difference of the program's own loss along its gradient equals the gradient's norm;
  (b) statistically (slow): the mean loss and mean gradient over ``K`` calls (fresh draws)
  equal JAX's means over ``K`` keys within a Welch t bound (Bonferroni over components);
- **trains** (slow): the loss curve of device-mode ``coreml_train_step`` + optax lies in
  the noise band of JAX + optax runs with different keys (helpers.noise_band).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import jax

import rlxjax
from helpers import TEST_BACKEND, assert_tracks_noise_band, assert_tree_close, loss_windows
from rlxjax.coreml.mil import function_block, operations
from rlxjax.coreml.interpreter import seed_fresh_draws
from test_random_models import MODELS, nnx_mlp

optax = pytest.importorskip("optax")

#: the Core ML random ops each model's training loss draws with
RANDOM_OPS = {"linen_cnn": {"random_bernoulli"}, "vae": {"random_normal"}, "linen_rnn": set(),
              "linen_rnn_dropout": {"random_bernoulli"},  # [steps, ...] before the loop
              "nnx": {"random_bernoulli"}, "equinox": {"random_bernoulli"},
              "seq2seq": {"random_uniform"}}  # categorical: JAX's Gumbel on a device uniform
K = 24            # calls / keys per mean
P_FAMILY = 1e-3   # family-wise false-failure rate of the mean checks (seeded: reproducible)
H = 1e-3          # central-difference step along the unit gradient direction
FD_RTOL = 5e-4    # see test_device_compiles_differentiates_and_saves_core_ml_random_ops


@pytest.fixture(autouse=True)
def _seeded():
    seed_fresh_draws(1717)
    yield
    seed_fresh_draws(None)


def _rng(name, seed):
    """The model's rng for run ``seed``: a key, or (nnx) its RNG state."""
    return nnx_mlp(dropout_seed=seed).rng if name == "nnx" else jax.random.key(seed)


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(x, np.float64))
                           for x in jax.tree_util.tree_leaves(tree)])


def _along(params, direction, h):
    return jax.tree_util.tree_map(lambda p, d: (p + h * d).astype(p.dtype), params, direction)


def _central_difference(compiled, case, direction, seed):
    out = []
    for h in (H, -H):
        seed_fresh_draws(seed)  # the same draws as the gradient's call
        (v, _), _ = compiled(_along(case.params, direction, h), case.rng, *case.batch)
        out.append(float(v))
    return (out[0] - out[1]) / (2 * H)


# (nn.RNN without a carry draws nothing live: its device program is its default one, run
# by default in test_dead_random.py; here with -m slow)
# (vae and the LSTM-cell dropout, ~7 s each, with -m slow too: equinox, linen_cnn, nnx,
# seq2seq run by default)
@pytest.mark.parametrize("name", [n if RANDOM_OPS[n] and n not in ("vae", "linen_rnn_dropout")
                                  else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(MODELS)])
def test_device_compiles_differentiates_and_saves_core_ml_random_ops(name, tmp_path):
    import coremltools as ct

    case = MODELS[name]()
    vg = rlxjax.coreml_value_and_grad(case.loss, has_aux=True, random="device",
                                      backend=TEST_BACKEND)
    compiled = vg.lower(case.params, case.rng, *case.batch).compile()
    compiled.validate()
    path = compiled.save(tmp_path / f"{name}.mlpackage")
    ops = {op.type for op in operations(function_block(ct.utils.load_spec(path), "main"))}
    assert {o for o in ops if o.startswith("random_")} == RANDOM_OPS[name]

    # (a) for any draw: d/dh loss(params + h g/|g|) at 0 == |g|, the draws held fixed by
    # re-seeding. Float32 central differences with H = 1e-3 on losses of O(1-10) carry
    # <= eps*|L|/H ~ 6e-4 absolute rounding error (O(H^2) curvature error is smaller);
    # FD_RTOL = 5e-4 of |g| (|g| in 0.98..6.7 here; observed 1.5e-5..5.4e-5). A backward
    # pass reading other draws than its forward misses by O(1).
    seed_fresh_draws(5)
    (v, rng), g = compiled(case.params, case.rng, *case.batch)
    norm = np.sqrt(np.sum(_flat(g) ** 2))
    direction = jax.tree_util.tree_map(lambda x: np.asarray(x) / norm, g)
    fd = _central_difference(compiled, case, direction, 5)
    print(f"\n{name}: |g| {norm:.6g}, central difference {fd:.6g}, "
          f"rel {abs(fd - norm) / norm:.2e}")
    assert abs(fd - norm) <= FD_RTOL * norm, (fd, norm)
    if not RANDOM_OPS[name]:  # nothing live is random: JAX's numbers exactly
        (w, _), gw = jax.jit(jax.value_and_grad(case.loss, has_aux=True))(
            case.params, case.rng, *case.batch)
        assert_tree_close((v, g), (w, gw), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n in MODELS if RANDOM_OPS[n]))
def test_device_mean_loss_and_gradient_equal_jaxs_over_keys(name):
    case = MODELS[name]()
    compiled = rlxjax.coreml_value_and_grad(case.loss, has_aux=True, random="device",
                                            backend=TEST_BACKEND).lower(
        case.params, case.rng, *case.batch).compile()
    # (b) the same distribution of (loss, gradient) as JAX's over keys: per component,
    # Welch's t of the two means of K samples against the t quantile at P_FAMILY
    # (Bonferroni over the components); components without spread on both sides are equal.
    jvg = jax.jit(jax.value_and_grad(case.loss, has_aux=True))
    ours, theirs = [], []
    for i in range(K):
        (v, _), g = compiled(case.params, _rng(name, 1000 + i), *case.batch)
        ours.append(np.concatenate([[float(v)], _flat(g)]))
        (w, _), gw = jvg(case.params, _rng(name, 2000 + i), *case.batch)
        theirs.append(np.concatenate([[float(w)], _flat(gw)]))
    ours, theirs = np.array(ours), np.array(theirs)
    se = np.sqrt(ours.var(0, ddof=1) / K + theirs.var(0, ddof=1) / K)
    diff = np.abs(ours.mean(0) - theirs.mean(0))
    fixed = se < 1e-7 * (1 + np.abs(theirs.mean(0)))
    np.testing.assert_allclose(ours.mean(0)[fixed], theirs.mean(0)[fixed], rtol=1e-4,
                               atol=1e-5)
    bound = stats.t.isf(P_FAMILY / (2 * se.size), 2 * K - 2)
    t = diff[~fixed] / se[~fixed]
    print(f"\n{name}: {t.size} random components, max Welch t {t.max():.3f} "
          f"(bound {bound:.3f}), {int(fixed.sum())} without spread")
    assert t.max() < bound, (t.max(), bound, int(np.argmax(t)))


# -- trains: the loss curve lies in JAX's noise band --------------------------------------
STEPS, WINDOW, JAX_RUNS, OUR_RUNS = 20, 5, 8, 2


def jax_curve(case, rng, opt):
    @jax.jit
    def step(p, s, rng):
        (v, rng), g = jax.value_and_grad(case.loss, has_aux=True)(p, rng, *case.batch)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, rng, v

    p, s, out = case.params, opt.init(case.params), []
    for _ in range(STEPS):
        p, s, rng, v = step(p, s, rng)
        out.append(float(v))
    return loss_windows(out, WINDOW)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_device_training_tracks_jaxs_noise_band(name):
    case = MODELS[name]()
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(case.loss, opt, has_aux=True, random="device",
                                    backend=TEST_BACKEND)
    ours = []
    for r in range(OUR_RUNS):
        seed_fresh_draws(r)
        state, rng, out = step.init(case.params), _rng(name, r), []
        for _ in range(STEPS):
            state, v, rng = step(state, rng, *case.batch)
            out.append(float(v))
        ours.append(loss_windows(out, WINDOW))
    jax_curves = [jax_curve(case, _rng(name, 100 + r), opt) for r in range(JAX_RUNS)]
    mean, tol = assert_tracks_noise_band(ours, jax_curves, trains=0.9)
    print(f"\n{name}: JAX mean {np.round(mean, 4)} +- {np.round(tol, 4)}; "
          f"ours {[np.round(c, 4).tolist() for c in ours]}")
    assert len(step._programs) == 1
