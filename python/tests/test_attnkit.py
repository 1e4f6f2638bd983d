"""The Python package against a NumPy fp64 reference written here (not the
library's own), on every available host backend; PyTorch's conventions;
zero-copy; errors; threads. With torch >= 2.0 importable, the same problems
are compared with torch's SDPA as well."""

import ctypes
import json
import re
import threading
import time

import numpy as np
import pytest

import attnkit
from attnkit import _arrays, _capi, _ops

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


def softmax_rows(s):
    """Softmax over the last axis; rows with no finite score give zeros
    (PyTorch >= 2.5's math SDPA does the same)."""
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def ref_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """torch.nn.functional.scaled_dot_product_attention in float64 numpy."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    if k.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, rep, axis=-3), np.repeat(v, rep, axis=-3)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            s = np.where(attn_mask, s, -np.inf)
        else:
            s = s + attn_mask
    return softmax_rows(s) @ v


def host_backends():
    """Available host backends, without the deliberately limited c-naive test
    plugin (test_unsupported_problem_is_not_implemented uses it)."""
    return [
        b["name"]
        for b in attnkit.backends()
        if b["available"] and b["memory"] == "host" and b["name"] != "c-naive"
    ]


BACKENDS = host_backends()


def test_backends_are_listed_with_capabilities():
    names = [b["name"] for b in attnkit.backends()]
    for expected in ("highway", "blas", "reference"):
        assert expected in names
    ref = next(b for b in attnkit.backends() if b["name"] == "reference")
    assert ref["available"] and ref["memory"] == "host"
    caps = ref["capabilities"]
    assert "f32" in caps["dtypes"] and "causal" in caps["masks"] and caps["lse"]


SDPA_CASES = [
    # (batch dims, Hq, Hkv, L, S, E, mask kind)
    ((2,), 4, 4, 17, 17, 32, None),
    ((2,), 8, 2, 33, 70, 64, "causal"),
    ((1, 2), 4, 1, 5, 40, 16, "bool"),
    ((3,), 2, 2, 9, 12, 80, "float"),
    ((), 4, 2, 1, 300, 128, None),  # decode, no batch dims
]


@pytest.mark.parametrize("backend", ["auto"] + BACKENDS)
@pytest.mark.parametrize("case", SDPA_CASES, ids=lambda c: f"h{c[1]}g{c[2]}l{c[3]}s{c[4]}{c[6]}")
def test_sdpa_matches_numpy_reference(backend, case):
    batch, hq, hkv, L, S, E, mask_kind = case
    q = rand(*batch, hq, L, E)
    k = rand(*batch, hkv, S, E)
    v = rand(*batch, hkv, S, E)
    mask = None
    if mask_kind == "bool":
        mask = RNG.uniform(size=(L, S)) > 0.3  # broadcast over batch and heads
    elif mask_kind == "float":
        mask = rand(1, hq, L, S)
        mask[..., 0, :] = -np.inf  # a fully blocked row: zeros
    o = attnkit.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=mask_kind == "causal",
        enable_gqa=hq != hkv,
        backend=backend,
    )
    want = ref_sdpa(q, k, v, attn_mask=mask, is_causal=mask_kind == "causal")
    assert o.shape == q.shape and o.dtype == np.float32
    np.testing.assert_allclose(o, want, rtol=1e-4, atol=2e-5)
    if backend != "auto":
        assert attnkit.last_run()["backend"] == backend


def test_f16_inputs_give_f16_outputs():
    q, k, v = (rand(2, 4, 20, 64, dtype=np.float16) for _ in range(3))
    o = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, backend="reference")
    assert o.dtype == np.float16
    np.testing.assert_allclose(o.astype(np.float64), ref_sdpa(q, k, v, is_causal=True), atol=2e-3)


def test_bool_mask_true_means_take_part():
    q, k, v = rand(1, 1, 3, 8), rand(1, 1, 5, 8), rand(1, 1, 5, 8)
    mask = np.zeros((3, 5), dtype=bool)
    mask[:, 2] = True  # every query sees only key 2
    o = attnkit.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    np.testing.assert_allclose(o[0, 0], np.repeat(v[0, 0, 2:3], 3, axis=0), rtol=1e-6)


def test_is_causal_is_top_left():
    q, k, v = rand(1, 2, 3, 16), rand(1, 2, 6, 16), rand(1, 2, 6, 16)
    o = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True)
    # Query 0 sees key 0 only (top-left), not keys 0..3 (bottom-right).
    np.testing.assert_allclose(o[0, :, 0], v[0, :, 0], rtol=1e-6)
    np.testing.assert_allclose(o, ref_sdpa(q, k, v, is_causal=True), rtol=1e-4, atol=2e-5)


def test_inputs_are_not_copied_and_output_aliases_none():
    q, k, v = rand(2, 4, 16, 32), rand(2, 4, 16, 32), rand(2, 4, 16, 32)
    kv = rand(2, 16, 4, 32).transpose(0, 2, 1, 3)  # a strided view: still no copy
    o = attnkit.scaled_dot_product_attention(q, k, kv, backend="reference")
    seen = _ops.last_call_addresses()
    assert seen["q"] == q.ctypes.data
    assert seen["k"] == k.ctypes.data
    assert seen["v"] == kv.ctypes.data
    assert not any(np.shares_memory(o, x) for x in (q, k, kv))
    np.testing.assert_allclose(o, ref_sdpa(q, k, kv), rtol=1e-4, atol=2e-5)


def test_attention_full_operator():
    B, H, G, Tq, Tk, d = 2, 4, 2, 7, 30, 32
    q, k, v = rand(B, H, Tq, d), rand(B, G, Tk, d), rand(B, G, Tk, d)
    bias = rand(B, H, Tq, Tk)
    lengths = [30, 19]
    o, lse = attnkit.attention(
        q, k, v, window=(8, 0), kv_lengths=lengths, bias=bias, softcap=5.0,
        return_lse=True, backend="reference",
    )
    # Reference: bottom-right window of 8 keys before the diagonal, per
    # sequence length, softcap before the bias.
    k64, v64 = (np.repeat(x, H // G, axis=1).astype(np.float64) for x in (k, v))
    q64 = q.astype(np.float64)
    s = q64 @ np.swapaxes(k64, -1, -2) / np.sqrt(d)
    s = 5.0 * np.tanh(s / 5.0) + bias
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    for b, n in enumerate(lengths):
        diag = i + n - Tq
        visible = (j <= diag) & (j >= diag - 8) & (j < n)
        s[b] = np.where(visible, s[b], -np.inf)
    want = softmax_rows(s) @ v64
    np.testing.assert_allclose(o, want, rtol=1e-4, atol=2e-5)
    m = np.max(s, axis=-1)
    want_lse = m + np.log(np.exp(s - m[..., None]).sum(-1))
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["highway", "blas", "reference"])
def test_attention_sinks_join_the_denominator(backend):
    """gpt-oss's sinks: o = sum_j e^s_j v_j / (sum_j e^s_j + e^sink_h), the
    lse with the sink in it; a sequence without keys gives 0 and the sink."""
    B, H, G, Tq, Tk, d = 2, 4, 2, 5, 40, 32
    q, k, v = rand(B, H, Tq, d), rand(B, G, Tk, d), rand(B, G, Tk, d)
    sinks = np.array([0.5, 3.0, 4.5, -1.0], dtype=np.float32)
    o, lse = attnkit.attention(q, k, v, causal=True, kv_lengths=[40, 0], sinks=sinks,
                               return_lse=True, backend=backend)
    k64, v64 = (np.repeat(x, H // G, axis=1).astype(np.float64) for x in (k, v))
    s = q.astype(np.float64) @ np.swapaxes(k64, -1, -2) / np.sqrt(d)
    s = np.where(np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq, s, -np.inf)
    s = np.concatenate([s, np.broadcast_to(sinks[None, :, None, None], (B, H, Tq, 1))], -1)
    s[1, :, :, :Tk] = -np.inf  # sequence 1 has no keys
    w = softmax_rows(s)
    np.testing.assert_allclose(o, w[..., :Tk] @ v64, rtol=1e-4, atol=2e-5)
    m = np.max(s, axis=-1)
    want_lse = m + np.log(np.exp(s - m[..., None]).sum(-1))
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    assert np.all(o[1] == 0) and np.all(lse[1] == sinks[None, :, None])
    without = attnkit.attention(q, k, v, causal=True, kv_lengths=[40, 0], backend=backend)
    assert np.abs(without[0] - o[0]).max() > 1e-2, "the sinks change nothing"
    with pytest.raises(ValueError, match=r"one logit per query head, shape \(4,\)"):
        attnkit.attention(q, k, v, sinks=sinks[:2], backend=backend)
    caps = next(b for b in attnkit.backends() if b["name"] == backend)["capabilities"]
    assert caps["sinks"] and caps["backward"]["sinks"]


@pytest.mark.parametrize("backend", ["highway", "blas", "reference"])
def test_sink_gradient_is_minus_p_sink_times_d(backend):
    """The backward with sinks (what the torch operator calls): dq, dk, dv
    from the lse with the sink, and dsinks_h = -sum_i exp(sink_h - lse_i)
    dO_i . O_i, against numpy in float64."""
    from attnkit import _ops
    B, H, G, T, d = 1, 4, 2, 9, 16
    q, k, v, d_o = rand(B, H, T, d), rand(B, G, T, d), rand(B, G, T, d), rand(B, H, T, d)
    sinks = np.array([0.5, 2.0, 1.0, -0.5], dtype=np.float32)
    args = (q, k, v, None, 0.0, True, None, True, backend)
    out, lse = _ops._Sdpa(*args, sinks=sinks).forward(return_lse=True)
    dq, dk, dv, dbias, dsinks = _ops._Sdpa(*args, sinks=sinks).backward(
        out, lse, d_o, mask_grad=False, sinks_grad=True)
    assert dbias is None and dsinks.shape == (H,)
    D = (d_o.astype(np.float64) * out).sum(-1)  # [B, H, T]
    want = -(np.exp(sinks[None, :, None].astype(np.float64) - lse) * D).sum(axis=(0, 2))
    np.testing.assert_allclose(dsinks, want, rtol=1e-4, atol=1e-6)
    assert np.abs(want).max() > 1e-2, "a weak check: the sinks take no share of the rows"
    # dQ against numpy's closed form with the sink in the weights.
    k64, v64 = (np.repeat(x, H // G, axis=1).astype(np.float64) for x in (k, v))
    s = q.astype(np.float64) @ np.swapaxes(k64, -1, -2) / np.sqrt(d)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - lse[..., None].astype(np.float64))
    dp = d_o.astype(np.float64) @ np.swapaxes(v64, -1, -2)
    ds = p * (dp - D[..., None])
    np.testing.assert_allclose(dq, ds @ k64 / np.sqrt(d), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["highway", "blas", "reference"])
@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_alibi_biases_by_distance_from_the_diagonal(backend, alignment):
    """ALiBi: -slope_h * |i + offset - j| added after softcap, keys on both
    sides of the diagonal (no causal mask), per-sequence kv_lengths."""
    B, H, G, Tq, Tk, d = 2, 4, 2, 6, 37, 16
    q, k, v = rand(B, H, Tq, d), rand(B, G, Tk, d), rand(B, G, Tk, d)
    slopes = np.array([0.5, 0.25, 0.0625, 0.0], dtype=np.float32)
    lengths = [37, 20]
    o, lse = attnkit.attention(q, k, v, kv_lengths=lengths, alibi_slopes=slopes, softcap=4.0,
                               alignment=alignment, return_lse=True, backend=backend)
    k64, v64 = (np.repeat(x, H // G, axis=1).astype(np.float64) for x in (k, v))
    s = q.astype(np.float64) @ np.swapaxes(k64, -1, -2) / np.sqrt(d)
    s = 4.0 * np.tanh(s / 4.0)
    i, j = np.arange(Tq)[:, None], np.arange(Tk)[None, :]
    for b, n in enumerate(lengths):
        diag = i + (n - Tq if alignment == "bottom_right" else 0)
        s[b] -= slopes[:, None, None].astype(np.float64) * np.abs(diag - j)[None]
        s[b] = np.where(j < n, s[b], -np.inf)
    np.testing.assert_allclose(o, softmax_rows(s) @ v64, rtol=1e-4, atol=2e-5)
    m = np.max(s, axis=-1)
    np.testing.assert_allclose(lse, m + np.log(np.exp(s - m[..., None]).sum(-1)), rtol=1e-5,
                               atol=1e-5)
    flipped = attnkit.attention(q, k, v, kv_lengths=lengths, alibi_slopes=-slopes, softcap=4.0,
                                alignment=alignment, backend=backend)
    assert np.abs(flipped - o)[:, :3].max() > 1e-2, "the slopes' sign changes nothing"
    with pytest.raises(ValueError, match=r"one slope per query head, shape \(4,\)"):
        attnkit.attention(q, k, v, alibi_slopes=slopes[:3], backend=backend)
    caps = next(b for b in attnkit.backends() if b["name"] == backend)["capabilities"]
    assert caps["alibi"] and caps["backward"]["alibi"]


@pytest.mark.parametrize("backend", ["highway", "blas", "reference"])
@pytest.mark.parametrize("value_dim", [8, 40])
def test_value_head_dim_of_its_own(backend, value_dim):
    """Ev != E (MLA; PyTorch's SDPA takes it): value [..., S, Ev] gives an
    output [..., L, Ev], through the SDPA function (GQA, causal) and
    attention() (BTHD, a window, the lse), against numpy in float64."""
    B, H, G, L, S, E = 2, 4, 2, 7, 19, 24
    q, k, v = rand(B, H, L, E), rand(B, G, S, E), rand(B, G, S, value_dim)
    got = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True,
                                               backend=backend)
    assert got.shape == (B, H, L, value_dim)
    np.testing.assert_allclose(got, ref_sdpa(q, k, v, is_causal=True), rtol=1e-4, atol=2e-5)
    qt, kt, vt = (np.ascontiguousarray(np.swapaxes(x, 1, 2)) for x in (q, k, v))
    o, lse = attnkit.attention(qt, kt, vt, window=(4, 0), layout="BTHD", return_lse=True,
                               backend=backend)
    assert o.shape == (B, L, H, value_dim) and lse.shape == (B, H, L)
    i, j = np.arange(L)[:, None] + S - L, np.arange(S)[None, :]
    window = (j <= i) & (j >= i - 4)
    np.testing.assert_allclose(np.swapaxes(o, 1, 2), ref_sdpa(q, k, v, attn_mask=window),
                               rtol=1e-4, atol=2e-5)
    with pytest.raises(ValueError, match="same shape but for the head dim"):
        attnkit.attention(q, k, v[:, :, :5], backend=backend)
    with pytest.raises(ValueError, match="query and key must have the same head dim E"):
        attnkit.scaled_dot_product_attention(q, k[..., :8], v, enable_gqa=True, backend=backend)
    caps = next(b for b in attnkit.backends() if b["name"] == backend)["capabilities"]
    assert caps["value_head_dim"]


def decode_kv(codes, kv_dtype):
    """int8 values or OCP fp8 codes (uint8) as float64, written here from the
    formats' definitions (E4M3: bias 7, S.1111.111 NaN, no Inf; E5M2: bias
    15, IEEE specials), not through the library."""
    if kv_dtype == "i8":
        return codes.astype(np.float64)
    c = codes.astype(np.int64)
    mant_bits, bias = (3, 7) if kv_dtype == "f8e4m3" else (2, 15)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c & 0x7F) >> mant_bits
    m = (c & ((1 << mant_bits) - 1)) / float(1 << mant_bits)
    value = np.where(e == 0, m * 2.0 ** (1 - bias), (1 + m) * 2.0 ** (e - bias))
    return sign * value


def random_kv(shape, kv_dtype):
    """Random int8 values, or fp8 codes without NaN and Inf."""
    if kv_dtype == "i8":
        return RNG.integers(-127, 128, size=shape, dtype=np.int8)
    codes = RNG.integers(0, 256, size=shape, dtype=np.uint8)
    special = (codes & 0x7F) == 0x7F if kv_dtype == "f8e4m3" else (codes & 0x7C) == 0x7C
    return np.where(special, codes & 0x80, codes).astype(np.uint8)  # specials as +-0


def bf16_round(x):
    """float32 values rounded to bf16 (nearest even), as float64."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("kv_dtype", ["f8e4m3", "f8e5m2"])
def test_fast_fp8_rounds_the_query_to_bf16(kv_dtype):
    """compute="fast" over an fp8 cache: Q rounded to bf16 (the type that
    holds every fp8 value), P may be too. A GQA decode (the kernel that
    widens codes to bf16 where the CPU has AVX512_BF16 and VBMI) against
    numpy with the rounded Q, within bf16's rounding of P; blas, which does
    not round Q, refuses by name."""
    B, H, G, S, E = 2, 8, 2, 300, 64
    q = rand(B, H, 1, E) * 3
    k, v = random_kv((B, G, S, E), kv_dtype), random_kv((B, G, S, E), kv_dtype)
    top = {"f8e4m3": 448.0, "f8e5m2": 57344.0}[kv_dtype]
    ks = RNG.uniform(0.5, 1.5, size=(B, G, S)).astype(np.float32) / top
    vs = RNG.uniform(0.5, 1.5, size=(B, G, S)).astype(np.float32) / top
    kd, vd = decode_kv(k, kv_dtype) * ks[..., None], decode_kv(v, kv_dtype) * vs[..., None]
    o = attnkit.attention(q, k, v, kv_dtype=kv_dtype, k_scale=ks, v_scale=vs, compute="fast",
                          backend="highway")
    want = ref_sdpa(bf16_round(q), kd, vd)
    # P rounded to bf16: each weight within 2^-8, so o within 2^-8 of sum p |v| (<= max |v|).
    np.testing.assert_allclose(o, want, rtol=0, atol=2.0 ** -8 * np.abs(vd).max() + 1e-6)
    exact = attnkit.attention(q, k, v, kv_dtype=kv_dtype, k_scale=ks, v_scale=vs,
                              backend="highway")
    assert np.abs(exact - ref_sdpa(q, kd, vd)).max() < 1e-5
    with pytest.raises(NotImplementedError, match=f"compute FAST with kv_dtype {kv_dtype}"):
        attnkit.attention(q, k, v, kv_dtype=kv_dtype, k_scale=ks, v_scale=vs, compute="fast",
                          backend="blas")


@pytest.mark.parametrize("backend", ["highway", "blas", "reference"])
@pytest.mark.parametrize("kv_dtype", ["i8", "f8e4m3", "f8e5m2"])
def test_attention_reads_quantized_kv_as_stored(backend, kv_dtype):
    """attention() over int8 and fp8 K/V (a serving cache as stored) with a
    scale per (token, KV head), and one per tensor, in both layouts, against
    numpy in float64 over the decoded values (decode_kv: this file's own)."""
    B, H, G, L, S, E = 2, 8, 2, 3, 70, 32
    q = rand(B, H, L, E)
    k, v = random_kv((B, G, S, E), kv_dtype), random_kv((B, G, S, E), kv_dtype)
    # Scales putting values around 1 (fp8 codes reach 448 and 57344).
    top = {"i8": 127.0, "f8e4m3": 448.0, "f8e5m2": 57344.0}[kv_dtype]
    ks = RNG.uniform(0.5, 1.5, size=(B, G, S)).astype(np.float32) / top
    vs = RNG.uniform(0.5, 1.5, size=(B, G, S)).astype(np.float32) / top
    name = None if kv_dtype == "i8" else kv_dtype  # int8 arrays say so themselves
    o = attnkit.attention(q, k, v, causal=True, kv_dtype=name, k_scale=ks, v_scale=vs,
                          backend=backend)
    kd, vd = decode_kv(k, kv_dtype) * ks[..., None], decode_kv(v, kv_dtype) * vs[..., None]
    i, j = np.arange(L)[:, None] + S - L, np.arange(S)[None, :]
    want = ref_sdpa(q, kd, vd, attn_mask=j <= i)
    np.testing.assert_allclose(o, want, rtol=1e-4, atol=2e-5)
    # BTHD storage, one scale per tensor (a scalar broadcast: stride 0).
    kt, vt = (np.ascontiguousarray(np.swapaxes(x, 1, 2)) for x in (k, v))
    o = attnkit.attention(np.ascontiguousarray(np.swapaxes(q, 1, 2)), kt, vt, layout="BTHD",
                          kv_dtype=name, k_scale=1.0 / top, v_scale=np.float32(2.0 / top),
                          backend=backend)
    want = ref_sdpa(q, decode_kv(k, kv_dtype) / top, decode_kv(v, kv_dtype) * 2.0 / top)
    np.testing.assert_allclose(np.swapaxes(o, 1, 2), want, rtol=1e-4, atol=2e-5)
    with pytest.raises(ValueError, match="need k_scale and v_scale"):
        attnkit.attention(q, k, v, kv_dtype=name, k_scale=ks, backend=backend)
    with pytest.raises(ValueError, match=r"k_scale must broadcast to k's shape without its head"):
        attnkit.attention(q, k, v, kv_dtype=name, k_scale=ks[:, :, :5], v_scale=vs,
                          backend=backend)


def test_quantized_kv_errors_name_the_dtype():
    q, k = rand(1, 4, 2, 16), random_kv((1, 2, 8, 16), "f8e4m3")
    with pytest.raises(ValueError, match="uint8: pass kv_dtype='f8e4m3' or 'f8e5m2'"):
        attnkit.attention(q, k, k, k_scale=1.0, v_scale=1.0)
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        attnkit.attention(q, k, k, kv_dtype="f8", k_scale=1.0, v_scale=1.0)
    with pytest.raises(ValueError, match="kv_dtype='i8' but k and v hold u8"):
        attnkit.attention(q, k, k, kv_dtype="i8", k_scale=1.0, v_scale=1.0)
    with pytest.raises(ValueError, match="k holds floats"):
        attnkit.attention(q, rand(1, 2, 8, 16), rand(1, 2, 8, 16), k_scale=1.0, v_scale=1.0)
    with pytest.raises(ValueError, match="k and v must share a dtype"):
        attnkit.attention(q, k, k.view(np.int8), kv_dtype="f8e4m3", k_scale=1.0, v_scale=1.0)
    # Integer arrays without kv_dtype or scales are values, as before.
    ki = RNG.integers(-3, 4, size=(1, 2, 8, 16), dtype=np.int8)
    np.testing.assert_allclose(attnkit.attention(q, ki, ki), ref_sdpa(q, ki, ki), rtol=1e-4,
                               atol=2e-5)


def test_quantized_kv_from_torch_float8_tensors():
    """torch's float8 dtypes say their format: the same output as the uint8
    codes with kv_dtype."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8 dtypes")
    q = rand(1, 4, 2, 16)
    k, v = random_kv((1, 2, 9, 16), "f8e4m3"), random_kv((1, 2, 9, 16), "f8e4m3")
    want = attnkit.attention(q, k, v, kv_dtype="f8e4m3", k_scale=0.01, v_scale=0.02)
    kt, vt = (torch.from_numpy(x).view(torch.float8_e4m3fn) for x in (k, v))
    got = attnkit.attention(torch.from_numpy(q), kt, vt, k_scale=0.01, v_scale=0.02)
    np.testing.assert_array_equal(got.numpy(), want)


def test_errors_say_what_is_wrong():
    q, k, v = rand(1, 4, 8, 16), rand(1, 2, 8, 16), rand(1, 2, 8, 16)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        attnkit.scaled_dot_product_attention(q, k, v)
    with pytest.raises(NotImplementedError, match="dropout_p=0.1"):
        attnkit.scaled_dot_product_attention(q, k, v, dropout_p=0.1, enable_gqa=True)
    with pytest.raises(ValueError, match="cannot be set together"):
        attnkit.scaled_dot_product_attention(
            q, k, v, attn_mask=np.ones((8, 8), bool), is_causal=True, enable_gqa=True
        )
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        attnkit.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend="nope")
    with pytest.raises(ValueError, match="query and key must have the same head dim E"):
        attnkit.scaled_dot_product_attention(q, rand(1, 2, 8, 8), v, enable_gqa=True)
    with pytest.raises(ValueError, match="does not broadcast"):
        attnkit.scaled_dot_product_attention(
            q, k, v, attn_mask=np.ones((3, 8), bool), enable_gqa=True
        )


def test_unsupported_problem_is_not_implemented():
    # c-naive (tests/testdata/older_table_plugin.c, loaded through
    # $ATTNKIT_PLUGIN_PATH) runs f32 without masks only.
    if "c-naive" not in [b["name"] for b in attnkit.backends()]:
        pytest.skip("the c-naive test plugin is not on ATTNKIT_PLUGIN_PATH")
    q = rand(1, 2, 4, 16)
    o = attnkit.scaled_dot_product_attention(q, q, q, backend="c-naive")
    np.testing.assert_allclose(o, ref_sdpa(q, q, q), rtol=1e-4, atol=2e-5)
    with pytest.raises(NotImplementedError, match="mask"):
        attnkit.scaled_dot_product_attention(q, q, q, is_causal=True, backend="c-naive")


def test_calls_release_the_gil_and_run_from_threads():
    q, k, v = rand(1, 8, 256, 64), rand(1, 8, 256, 64), rand(1, 8, 256, 64)
    want = attnkit.scaled_dot_product_attention(q, k, v, backend="reference")
    # While one thread is inside a long call, Python code keeps running here.
    done = threading.Event()
    ticks = 0

    def worker():
        attnkit.scaled_dot_product_attention(q, k, v, backend="reference")
        done.set()

    t = threading.Thread(target=worker)
    start = time.perf_counter()
    t.start()
    while not done.is_set():
        ticks += 1
    t.join()
    assert time.perf_counter() - start > 0.01, "the call was too short to tell"
    assert ticks > 1000, f"the main thread ran only {ticks} times: the GIL was held"
    # Several threads at once, each getting the right answer.
    results = [None] * 4

    def run(i):
        results[i] = attnkit.scaled_dot_product_attention(
            q, k, v, backend=["highway", "blas", "reference", "auto"][i]
        )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-4, atol=2e-5)


def test_struct_layouts_match_the_library():
    # _capi checks every struct's size against the library at import; this
    # checks the check runs on what it claims to.
    from attnkit import _capi

    assert _capi.lib.attnkit_struct_size(b"attnkit_problem") == ctypes.sizeof(_capi.Problem)
    assert _capi.lib.attnkit_struct_size(b"no_such_struct") == 0


def _torch():
    try:
        import torch as t  # noqa: F401
    except ImportError:
        return None
    if int(t.__version__.split(".")[0]) < 2:
        return None
    return t


@pytest.mark.skipif(_torch() is None, reason="torch >= 2.0 is not importable here")
@pytest.mark.parametrize("case", SDPA_CASES, ids=lambda c: f"h{c[1]}g{c[2]}l{c[3]}s{c[4]}{c[6]}")
def test_matches_torch_sdpa(case):
    t = _torch()
    batch, hq, hkv, L, S, E, mask_kind = case
    q, k, v = rand(*batch, hq, L, E), rand(*batch, hkv, S, E), rand(*batch, hkv, S, E)
    mask = None
    if mask_kind == "bool":
        mask = RNG.uniform(size=(L, S)) > 0.3
    elif mask_kind == "float":
        mask = rand(1, hq, L, S)
    tq, tk, tv = (t.from_numpy(x) for x in (q, k, v))
    tmask = None if mask is None else t.from_numpy(mask)
    want = t.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=tmask, is_causal=mask_kind == "causal", enable_gqa=hq != hkv
    )
    got = attnkit.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=tmask, is_causal=mask_kind == "causal", enable_gqa=hq != hkv
    )
    assert isinstance(got, t.Tensor)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=2e-5)


@pytest.mark.skipif(_torch() is None, reason="torch >= 2.0 is not importable here")
def test_value_head_dim_matches_torch_with_gradients():
    """PyTorch's SDPA with Ev != E, forward and (autograd) backward."""
    t = _torch()
    q, k, v = rand(2, 4, 9, 24), rand(2, 2, 13, 24), rand(2, 2, 13, 40)
    grads = []
    for fn in (t.nn.functional.scaled_dot_product_attention,
               attnkit.scaled_dot_product_attention):
        tq, tk, tv = (t.from_numpy(x).requires_grad_() for x in (q, k, v))
        out = fn(tq, tk, tv, is_causal=True, enable_gqa=True)
        assert tuple(out.shape) == (2, 4, 9, 40)
        out.square().sum().backward()
        grads.append([out.detach().numpy()] + [x.grad.numpy() for x in (tq, tk, tv)])
    for want, got in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=3e-5)


def test_structs_are_built_from_the_library_layouts():
    # No struct is written in Python: each has exactly the fields, offsets
    # and size the library reports for its C struct (attnkit_struct_layout).
    for cname, pyname in _capi._STRUCT_NAMES.items():
        layout = json.loads(_capi.lib.attnkit_struct_layout(cname.encode()).decode())
        struct = getattr(_capi, pyname)
        assert [name for name, _ in struct._fields_] == [f["name"] for f in layout["fields"]]
        for f in layout["fields"]:
            assert getattr(struct, f["name"]).offset == f["offset"], (cname, f)
        assert ctypes.sizeof(struct) == layout["size"] == _capi.lib.attnkit_struct_size(
            cname.encode()
        )
    assert _capi.lib.attnkit_struct_layout(b"attnkit_nothing") is None


# ---- compute modes -------------------------------------------------------------


def bf16_codec(monkeypatch):
    """(to_bf16, from_bf16): float32 arrays to arrays attnkit reads as bf16
    and back. ml_dtypes.bfloat16 when it is installed; otherwise uint16
    arrays holding bf16 bits, registered as attnkit's bf16 for this test
    (numpy has no bfloat16 of its own)."""
    if _arrays._NP_BF16 is not None:
        return (lambda x: np.asarray(x, np.float32).astype(_arrays._NP_BF16),
                lambda a: np.asarray(a).astype(np.float32))
    u16 = np.dtype(np.uint16)
    monkeypatch.setitem(_arrays._NP_CODES, u16.num, _capi.BF16)
    monkeypatch.setitem(_arrays._NP_DTYPES, _capi.BF16, u16)

    def to_bf16(x):  # round to nearest even, as the library does
        u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    def from_bf16(a):
        return (np.asarray(a).astype(np.uint32) << 16).view(np.float32)

    return to_bf16, from_bf16


def test_fast_compute_bf16_on_highway_matches_fp64(monkeypatch):
    to_bf16, from_bf16 = bf16_codec(monkeypatch)
    q = rand(2, 8, 33, 64)
    k, v = to_bf16(rand(2, 2, 70, 64)), to_bf16(rand(2, 2, 70, 64))
    kf, vf = from_bf16(k), from_bf16(v)
    want = ref_sdpa(q, kf, vf, is_causal=True)
    # FAST may round Q to K's type before Q.K: against the reference of the
    # rounded Q only P's rounding to bf16 is left (at most 2^-8 of a weight).
    want_rounded_q = ref_sdpa(from_bf16(to_bf16(q)), kf, vf, is_causal=True)
    # f32 queries over a bf16 cache.
    fast = attnkit.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True, backend="highway", compute="fast")
    assert attnkit.last_run()["backend"] == "highway"
    assert fast.dtype == np.float32
    np.testing.assert_allclose(fast, want_rounded_q, atol=4e-3)
    np.testing.assert_allclose(fast, want, atol=1.5e-2)
    exact = attnkit.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True, backend="highway", compute="exact")
    np.testing.assert_allclose(exact, want, rtol=1e-4, atol=2e-5)
    assert not np.array_equal(fast, exact), "compute='fast' did not reach the backend"
    # Everything in bf16 (O too), through attention() as well.
    qb = to_bf16(q)
    for o in (
        attnkit.scaled_dot_product_attention(qb, k, v, is_causal=True, enable_gqa=True,
                                             backend="highway", compute="fast"),
        attnkit.attention(qb, k, v, causal=True, alignment="top_left", backend="highway",
                          compute="fast"),
    ):
        assert o.dtype == qb.dtype
        np.testing.assert_allclose(from_bf16(o), want_rounded_q, atol=8e-3)
        np.testing.assert_allclose(from_bf16(o), want, atol=1.5e-2)


def test_fast_compute_is_refused_where_a_backend_cannot(monkeypatch):
    to_bf16, _ = bf16_codec(monkeypatch)
    q, k, v = rand(1, 2, 5, 16), to_bf16(rand(1, 2, 9, 16)), to_bf16(rand(1, 2, 9, 16))
    caps = {b["name"]: b["capabilities"] for b in attnkit.backends()}
    assert {"bf16", "f16", "i8"} <= set(caps["highway"]["fast_kv_dtypes"])
    assert caps["blas"]["fast_kv_dtypes"] == []
    with pytest.raises(NotImplementedError, match="compute FAST with kv_dtype bf16"):
        attnkit.scaled_dot_product_attention(q, k, v, backend="blas", compute="fast")
    # With f32 K/V there is nothing to round: FAST is EXACT and blas runs it.
    kf = rand(1, 2, 9, 16)
    o = attnkit.scaled_dot_product_attention(q, kf, kf, backend="blas", compute="fast")
    np.testing.assert_allclose(o, ref_sdpa(q, kf, kf), rtol=1e-4, atol=2e-5)


def test_compute_bad_values_are_refused_with_the_allowed_ones():
    q = rand(1, 2, 4, 16)
    for bad in ("quick", "", None, 1):
        message = f"compute must be 'exact' or 'fast'; got {bad!r}"
        with pytest.raises(ValueError, match=re.escape(message)):
            attnkit.scaled_dot_product_attention(q, q, q, compute=bad)
        with pytest.raises(ValueError, match=re.escape(message)):
            attnkit.attention(q, q, q, compute=bad)
    with pytest.raises(TypeError):  # keyword-only, as backend is
        attnkit.scaled_dot_product_attention(q, q, q, None, 0.0, False, None, False, "fast")
    with pytest.raises(ValueError, match="^compute must be one of COMPUTE_UNSPECIFIED, EXACT, FAST"):
        attnkit.AttentionConfig(compute="quick")
    # Either case, as for the config's enums.
    np.testing.assert_array_equal(attnkit.attention(q, q, q, compute="FAST"),
                                  attnkit.attention(q, q, q, compute="fast"))


def test_compute_defaults_to_exact(monkeypatch):
    import inspect

    for fn in (attnkit.scaled_dot_product_attention, attnkit.attention):
        param = inspect.signature(fn).parameters["compute"]
        assert param.default == "exact" and param.kind == param.KEYWORD_ONLY
    to_bf16, _ = bf16_codec(monkeypatch)
    q, k, v = rand(1, 4, 17, 32), to_bf16(rand(1, 4, 40, 32)), to_bf16(rand(1, 4, 40, 32))
    for backend in ("highway", "reference"):
        default = attnkit.scaled_dot_product_attention(q, k, v, backend=backend)
        exact = attnkit.scaled_dot_product_attention(q, k, v, backend=backend, compute="exact")
        np.testing.assert_array_equal(default, exact)
        np.testing.assert_array_equal(attnkit.attention(q, k, v, backend=backend), exact)
    # blas computes only EXACT: the default runs there.
    attnkit.scaled_dot_product_attention(q, k, v, backend="blas")
    c = attnkit.AttentionConfig(num_heads=2, head_dim=16, q_len=4, dtype="bf16")
    assert c.compute == "COMPUTE_UNSPECIFIED" and not c.id.endswith("_fast")
    assert c.replace(compute="fast").id.endswith("_bf16_fast")
