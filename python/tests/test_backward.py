"""The backward pass from Python: scaled_dot_product_attention_backward on
numpy arrays against a float64 NumPy reference written here (itself checked
against central finite differences of the forward), on every host backend
with a backward; and, with torch >= 2.0 importable, autograd through
scaled_dot_product_attention against the gradients of torch's own SDPA."""

import numpy as np
import pytest

import attnkit

RNG = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


def _scores(q, k, attn_mask, is_causal, scale):
    """Scores [..., Hq, L, S] in float64 with blocked pairs at -inf, and k
    repeated over each KV head's query heads."""
    rep = q.shape[-3] // k.shape[-3]
    kr = np.repeat(k, rep, axis=-3)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(kr, -1, -2) * scale
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:  # top-left, as PyTorch
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            s = np.where(attn_mask, s, -np.inf)
        else:
            s = s + attn_mask
    return s, kr, scale


def _softmax(s):
    """Rows with no finite score give zeros (attnkit and PyTorch >= 2.5)."""
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def ref_forward(q, k, v, attn_mask=None, is_causal=False, scale=None):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s, _, _ = _scores(q, k, attn_mask, is_causal, scale)
    return _softmax(s) @ np.repeat(v, q.shape[-3] // k.shape[-3], axis=-3)


def ref_backward(q, k, v, d_o, attn_mask=None, is_causal=False, scale=None):
    """(dq, dk, dv, dbias) of SDPA in float64: dS = P (dO V^T - rowsum(dO O)),
    dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO, with dK and dV summed
    over the query heads of each KV head; dbias = dS, [..., Hq, L, S]."""
    q, k, v, d_o = (np.asarray(x, dtype=np.float64) for x in (q, k, v, d_o))
    s, kr, scale = _scores(q, k, attn_mask, is_causal, scale)
    rep = q.shape[-3] // k.shape[-3]
    vr = np.repeat(v, rep, axis=-3)
    p = _softmax(s)
    o = p @ vr
    dp = d_o @ np.swapaxes(vr, -1, -2)
    ds = p * (dp - np.sum(d_o * o, axis=-1, keepdims=True))
    dq = scale * ds @ kr
    dk_r = scale * np.swapaxes(ds, -1, -2) @ q
    dv_r = np.swapaxes(p, -1, -2) @ d_o

    def group_sum(x):  # [..., Hq, S, E] -> [..., Hkv, S, E]
        shape = x.shape[:-3] + (k.shape[-3], rep) + x.shape[-2:]
        return x.reshape(shape).sum(axis=-3)

    return dq, group_sum(dk_r), group_sum(dv_r), ds


def test_numpy_reference_matches_finite_differences():
    # The reference this file holds attnkit to, checked first: central
    # differences of L = sum(dO * O) in float64, GQA, causal and a bias.
    q, k, v = (rand(1, 4, 3, 5).astype(np.float64), rand(1, 2, 4, 5).astype(np.float64),
               rand(1, 2, 4, 5).astype(np.float64))
    bias = rand(1, 1, 3, 4).astype(np.float64)
    d_o = rand(1, 4, 3, 5).astype(np.float64)
    want = ref_backward(q, k, v, d_o, attn_mask=bias)
    inputs = [q, k, v, bias]

    def loss():
        return np.sum(d_o * ref_forward(q, k, v, attn_mask=bias))

    h = 1e-6
    for x, grad in zip(inputs, want[:3] + (want[3].sum(axis=1, keepdims=True),)):
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            keep = x[idx]
            x[idx] = keep + h
            up = loss()
            x[idx] = keep - h
            down = loss()
            x[idx] = keep
            numeric[idx] = (up - down) / (2 * h)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def backward_backends():
    return [
        b["name"]
        for b in attnkit.backends()
        if b["available"] and b["memory"] == "host" and b["capabilities"]["backward"]["supported"]
    ]


BACKENDS = backward_backends()

# (batch dims, Hq, Hkv, L, S, E, mask kind); "bool" masks broadcast over
# heads and leave one row with no key.
CASES = [
    ((2,), 4, 2, 9, 13, 16, "causal"),
    ((2,), 4, 4, 7, 7, 8, None),
    ((1, 2), 4, 1, 5, 11, 32, "bool"),
    ((2,), 2, 2, 6, 10, 16, "float"),
]


def _case_inputs(case):
    batch, hq, hkv, L, S, E, kind = case
    q, k, v = rand(*batch, hq, L, E), rand(*batch, hkv, S, E), rand(*batch, hkv, S, E)
    mask = None
    if kind == "bool":
        mask = RNG.uniform(size=(L, S)) > 0.3
        mask[2, :] = False  # a row that sees no key
    elif kind == "float":
        mask = rand(1, hq, L, S)
    return q, k, v, mask, kind == "causal", hq != hkv


def _close(got, want, what):
    # f32 accumulation against float64: relative to the gradient's scale.
    tol = 2e-5 * max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=1e-4, atol=tol,
                               err_msg=what)


@pytest.mark.parametrize("backend", ["auto"] + BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"h{c[1]}g{c[2]}l{c[3]}s{c[4]}{c[6]}")
def test_backward_matches_the_numpy_reference(case, backend):
    q, k, v, mask, causal, gqa = _case_inputs(case)
    o, lse = attnkit.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa, return_lse=True
    )
    assert lse.shape == q.shape[:-1] and lse.dtype == np.float32
    d_o = rand(*o.shape)
    mask_grad = case[6] == "float"
    got = attnkit.scaled_dot_product_attention_backward(
        q, k, v, o, lse, d_o, attn_mask=mask, is_causal=causal, enable_gqa=gqa,
        backend=backend, mask_grad=mask_grad,
    )
    want = ref_backward(q, k, v, d_o, attn_mask=mask, is_causal=causal)
    assert [g.shape for g in got[:3]] == [q.shape, k.shape, v.shape]
    assert all(g.dtype == np.float32 for g in got)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        _close(g, w, name)
    if mask_grad:
        assert got[3].shape == mask.shape
        _close(got[3], want[3].sum(axis=0, keepdims=True), "dmask")
    if case[6] == "bool":
        assert np.all(got[0][..., 2, :] == 0), "a row with no key must get dq = 0"
    run = attnkit.last_run()
    assert run["kernel"], run
    if backend == "auto":
        assert "whose backward supports this problem" in run["reason"], run
    else:
        assert run["backend"] == backend and "chosen by name" in run["reason"], run


def test_backward_of_strided_and_f16_inputs():
    # BTHD views (a transpose, not copied by the forward) and f16 storage:
    # gradients come back in f16, in q's logical shape.
    base = rand(2, 12, 4, 16)  # [B, L, H, E]
    q = base.transpose(0, 2, 1, 3)
    k, v = rand(2, 2, 12, 16), rand(2, 2, 12, 16)
    o, lse = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True,
                                                  return_lse=True)
    d_o = rand(*o.shape)
    dq, dk, dv = attnkit.scaled_dot_product_attention_backward(
        q, k, v, o, lse, d_o, is_causal=True, enable_gqa=True
    )
    want = ref_backward(q, k, v, d_o, is_causal=True)
    for name, g, w in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        _close(g, w, name)
    h = [x.astype(np.float16) for x in (q, k, v)]
    o16, lse16 = attnkit.scaled_dot_product_attention(*h, is_causal=True, enable_gqa=True,
                                                      return_lse=True)
    grads = attnkit.scaled_dot_product_attention_backward(
        *h, o16, lse16, d_o.astype(np.float16), is_causal=True, enable_gqa=True
    )
    want16 = ref_backward(*h, d_o.astype(np.float16), is_causal=True)
    for name, g, w in zip(("dq", "dk", "dv"), grads, want16):
        assert g.dtype == np.float16, name
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=2e-2, atol=2e-2, err_msg=name)


def test_backward_errors_say_why():
    q, k, v = rand(1, 2, 4, 8), rand(1, 2, 4, 8), rand(1, 2, 4, 8)
    o, lse = attnkit.scaled_dot_product_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=r"lse has shape \(1, 2, 5\)"):
        attnkit.scaled_dot_product_attention_backward(q, k, v, o, np.zeros((1, 2, 5)), o)
    with pytest.raises(ValueError, match="grad_out has shape"):
        attnkit.scaled_dot_product_attention_backward(q, k, v, o, lse, o[..., :4])
    with pytest.raises(ValueError, match="mask_grad needs a float attn_mask"):
        attnkit.scaled_dot_product_attention_backward(q, k, v, o, lse, o, mask_grad=True)
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        attnkit.scaled_dot_product_attention_backward(q, k, v, o, lse, o, backend="nope")
    if "c-naive" in [b["name"] for b in attnkit.backends()]:
        # The test plugin (an older plugin table) has no backward pass.
        with pytest.raises(NotImplementedError, match="backward"):
            attnkit.scaled_dot_product_attention_backward(q, k, v, o, lse, o, backend="c-naive")


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if int(torch.__version__.split(".")[0]) >= 2 else None


torch_only = pytest.mark.skipif(_torch() is None, reason="torch >= 2.0 is not importable here")


def _torch_case(t, case, dtype):
    q, k, v, mask, causal, gqa = _case_inputs(case)
    leaves = [t.tensor(x, dtype=dtype, requires_grad=True) for x in (q, k, v)]
    tmask = None
    if mask is not None:
        tmask = t.tensor(mask) if mask.dtype == np.bool_ else t.tensor(mask, dtype=dtype,
                                                                      requires_grad=True)
    return leaves, tmask, causal, gqa


@torch_only
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"h{c[1]}g{c[2]}l{c[3]}s{c[4]}{c[6]}")
def test_autograd_matches_torch_sdpa_gradients(case):
    # torch's math SDPA in float64 is the reference; attnkit computes in f32
    # and hands gradients back in the leaves' dtype (float64 here).
    t = _torch()
    (q, k, v), mask, causal, gqa = _torch_case(t, case, t.float64)
    d_o = t.tensor(rand(*q.shape), dtype=t.float64)
    out = attnkit.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                               enable_gqa=gqa)
    assert out.grad_fn is not None
    got = t.autograd.grad(out, [q, k, v] + ([mask] if mask is not None and mask.requires_grad
                                            else []), d_o)
    want_out = t.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                            is_causal=causal, enable_gqa=gqa)
    leaves = [q, k, v] + ([mask] if mask is not None and mask.requires_grad else [])
    want = t.autograd.grad(want_out, leaves, d_o)
    # float64 inputs run in f32 (attnkit has no f64 kernels): out is f32.
    assert out.dtype == t.float32
    t.testing.assert_close(out.detach(), want_out.detach().float(), rtol=1e-4, atol=2e-5)
    for name, g, w in zip(("dq", "dk", "dv", "dmask"), got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        t.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, msg=name)


@torch_only
def test_autograd_through_a_training_step():
    # f32 leaves in BTHD (transposed views), a loss through out.sum() (whose
    # dL/dout is a stride-0 broadcast), return_lse with a non-differentiable
    # lse, and no graph under no_grad.
    t = _torch()
    base = t.randn(2, 10, 4, 16)
    q = base.transpose(1, 2).requires_grad_()
    k = t.randn(2, 2, 10, 16, requires_grad=True)
    v = t.randn(2, 2, 10, 16, requires_grad=True)
    out, lse = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True,
                                                    return_lse=True)
    assert not lse.requires_grad
    out.sum().backward()
    qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
    t.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=True,
                                                 enable_gqa=True).sum().backward()
    for name, x, r in (("dq", q, qr), ("dk", k, kr), ("dv", v, vr)):
        t.testing.assert_close(x.grad, r.grad, rtol=1e-4, atol=1e-4, msg=name)
    scores = (q @ k.repeat_interleave(2, dim=1).transpose(-1, -2)) / 4.0
    scores = scores.masked_fill(~t.ones(10, 10, dtype=t.bool).tril(), float("-inf"))
    t.testing.assert_close(lse, t.logsumexp(scores, dim=-1).detach(), rtol=1e-5, atol=1e-5)
    with t.no_grad():
        assert attnkit.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                    enable_gqa=True).grad_fn is None
    # bf16 leaves get bf16 gradients.
    qb, kb, vb = (x.detach().to(t.bfloat16).requires_grad_() for x in (q, k, v))
    ob = attnkit.scaled_dot_product_attention(qb, kb, vb, is_causal=True, enable_gqa=True)
    ob.sum().backward()
    assert qb.grad.dtype == kb.grad.dtype == t.bfloat16
    t.testing.assert_close(qb.grad.float(), q.grad, rtol=5e-2, atol=5e-2)


@torch_only
def test_autograd_refuses_what_it_cannot_differentiate():
    t = _torch()
    q = t.randn(1, 2, 4, 8, requires_grad=True)
    out = attnkit.scaled_dot_product_attention(q, q, q)
    # create_graph (a gradient penalty, a Hessian) would need the backward's
    # own derivative: refused, never a gradient that silently lacks a term.
    with pytest.raises(RuntimeError, match="create_graph"):
        t.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        attnkit.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    if "c-naive" in [b["name"] for b in attnkit.backends()]:
        with pytest.raises(NotImplementedError, match="has no backward pass"):
            attnkit.scaled_dot_product_attention(q, q, q, backend="c-naive")


@torch_only
def test_autograd_under_fast_rounds_bf16_weights_and_stays_close():
    # compute="fast" reaches the backward: on all-bf16 inputs a backend may
    # round P and dS to bf16 there (core/fast_compute.h), and its gradients
    # stay within bf16's reach of the exact ones; "fast" with a query dtype
    # other than the keys' is refused (FAST would round Q, which has no
    # gradient).
    t = _torch()
    t.manual_seed(3)
    # onednn with a bf16 matmul rounds P and dS (its kernel name then says
    # so); highway computes FAST's backward exactly, which FAST permits.
    fast_bf16 = [b["name"] for b in attnkit.backends()
                 if "bf16" in b["capabilities"]["fast_kv_dtypes"]]
    backend = "onednn" if "onednn" in fast_bf16 else "highway"
    leaves = [t.randn(1, 4, 33, 32).to(t.bfloat16) for _ in range(3)]
    grads = {}
    for compute in ("exact", "fast"):
        q, k, v = (x.clone().requires_grad_() for x in leaves)
        out = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend,
                                                   compute=compute)
        (out.float() * t.linspace(-1, 1, 32)).sum().backward()
        grads[compute] = [x.grad.float() for x in (q, k, v)]
        run = attnkit.last_run()
        assert run["backend"] == backend
        if backend == "onednn" and compute == "fast":
            assert "dv,dk,dq=bf16" in run["kernel"], run
    for name, fast, exact in zip(("dq", "dk", "dv"), grads["fast"], grads["exact"]):
        t.testing.assert_close(fast, exact, rtol=5e-2, atol=5e-2, msg=name)
    q = t.randn(1, 2, 4, 8, requires_grad=True)
    kb = t.randn(1, 2, 4, 8).to(t.bfloat16)
    with pytest.raises((ValueError, NotImplementedError), match="kv_dtype"):
        attnkit.scaled_dot_product_attention(q, kb, kb, compute="fast").sum().backward()


def test_backward_under_fast_on_bf16_arrays(monkeypatch):
    # scaled_dot_product_attention_backward(compute="fast") on bf16 arrays
    # (no torch): the gradients of a backend that rounds P and dS to bf16
    # (onednn with a bf16 matmul; else highway, which runs FAST's backward
    # exactly) stay within bf16's reach of the exact ones, the kernel name
    # says which products ran in bf16, and a FAST backward with a query dtype
    # other than the keys' is refused by name.
    from test_attnkit import bf16_codec

    to_bf16, from_bf16 = bf16_codec(monkeypatch)
    rng = np.random.default_rng(9)
    q, k, v, d_o = (to_bf16(rng.uniform(-1, 1, (1, 4, 40, 32))) for _ in range(4))
    fast_bf16 = [b["name"] for b in attnkit.backends()
                 if "bf16" in b["capabilities"]["fast_kv_dtypes"]]
    backend = "onednn" if "onednn" in fast_bf16 else "highway"
    grads = {}
    for compute in ("exact", "fast"):
        o, lse = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend,
                                                      compute=compute, return_lse=True)
        grads[compute] = [from_bf16(g) for g in attnkit.scaled_dot_product_attention_backward(
            q, k, v, o, lse, d_o, is_causal=True, backend=backend, compute=compute)]
        kernel = attnkit.last_run()["kernel"]
        assert ("dv,dk,dq=bf16" in kernel) == (backend == "onednn" and compute == "fast"), kernel
    for name, fast, exact in zip(("dq", "dk", "dv"), grads["fast"], grads["exact"]):
        np.testing.assert_allclose(fast, exact, rtol=0, atol=3e-2, err_msg=name)
    q32 = from_bf16(q)
    o, lse = attnkit.scaled_dot_product_attention(q32, k, v, backend="highway", compute="fast",
                                                  return_lse=True)
    with pytest.raises(ValueError, match="kv_dtype"):
        attnkit.scaled_dot_product_attention_backward(q32, k, v, o, lse, from_bf16(d_o),
                                                      backend="highway", compute="fast")
