"""AttentionConfig, check(), compare() and the layer (MultiHeadAttention,
KVCache) from Python, the layer against a NumPy fp64 reference written
here."""

import dataclasses
import json
import os

import numpy as np
import pytest

import attnkit
from attnkit import _capi

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.uniform(-1, 1, size=shape).astype(np.float32)


# ---- AttentionConfig ---------------------------------------------------------


def test_config_mirrors_the_proto_field_for_field():
    # The library's JSON of an empty config has every proto field with its
    # default; the dataclass must have the same names and defaults.
    lib = json.loads(_capi.call_string(_capi.lib.attnkit_config_from_text, b""))
    assert attnkit.AttentionConfig().to_dict() == lib
    assert [f.name for f in dataclasses.fields(attnkit.AttentionConfig)] == list(lib)


def test_config_text_round_trip_and_validation(tmp_path):
    c = attnkit.AttentionConfig(
        name="gqa decode", num_heads=32, num_kv_heads=8, head_dim=128, q_len=1, kv_len=4096,
        batch=2, kv_lengths=[4000, 4096], mask="causal", alignment="bottom_right", dtype="bf16",
        scale=0.125, memory_budget_bytes=1 << 33,
    )
    text = c.to_text()
    assert "kind: CAUSAL" in text and "dtype: BF16" in text
    assert "memory_budget_bytes: 8589934592" in text
    assert attnkit.AttentionConfig.from_text(text) == c
    path = tmp_path / "c.textproto"
    path.write_text(text)
    assert attnkit.AttentionConfig.from_file(path) == c
    assert c.id == "gqa_h32_g8_q1_k4096_d128_b2_causal_br_pad_bf16"
    with pytest.raises(ValueError, match="head_dim"):
        c.replace(head_dim=0).validate()
    with pytest.raises(ValueError, match="line 2, column"):
        attnkit.AttentionConfig.from_text("num_heads: 8\nmask { kind: CAUSL }")
    with pytest.raises(ValueError, match="dtype must be one of"):
        attnkit.AttentionConfig(dtype="f64")
    with pytest.raises(ValueError, match="no field num_haeds"):
        attnkit.AttentionConfig.from_dict({"num_haeds": 8})


# ---- check and compare -------------------------------------------------------


def test_check_runs_every_backend_against_the_reference():
    cfg = attnkit.AttentionConfig(num_heads=4, num_kv_heads=2, head_dim=32, q_len=9, kv_len=20,
                                  mask="causal", alignment="BOTTOM_RIGHT", return_lse=True)
    report = attnkit.check(cfg)
    assert report.passed, report.to_markdown()
    names = [r["backend"] for r in report.results]
    for b in ("highway", "blas", "reference"):
        assert report[b]["status"] == "pass"
        assert 0 <= report[b]["max_bound_fraction"] < 1
        assert report[b]["checked"] > 0
    if "c-naive" in names:  # the limited test plugin refuses masks
        assert report["c-naive"]["status"] == "unsupported"
        assert "mask" in report["c-naive"]["detail"]
    md = report.to_markdown()
    assert "| highway |" in md and "err/bound" in md
    # The same config as text, and a subset of backends.
    only = attnkit.check(cfg.to_text(), backends=["highway"])
    assert [r["backend"] for r in only.results] == ["highway"]
    # The report's config is the one run, its unset memory budget shown as the default.
    assert only.config == cfg.replace(memory_budget_bytes=16 << 30)
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        attnkit.check(cfg, backends="nope")
    with pytest.raises(ValueError, match="alignment"):
        attnkit.check(cfg.replace(alignment="ALIGNMENT_UNSPECIFIED"))


def test_compare_returns_the_json_report_records():
    cfg = attnkit.AttentionConfig(name="tiny", num_heads=2, head_dim=16, q_len=8, mask="causal")
    report = attnkit.compare(cfg, backends=["highway", "reference"], threads=1)
    assert report.machine["threads"] == 1 and report.limits["peak_fma_gflops"] > 0
    records = report.records()
    # The backends named, then the auto row: what auto chose, timed.
    assert [r["backend"] for r in records] == ["highway", "reference", "auto"]
    for r in records:
        assert r["status"] == "ok" and r["problem"] == "tiny" and r["median_s"] > 0
    assert max(r["speedup_vs_best"] for r in records[:2]) == 1.0
    assert records[2]["detail"].startswith("chose ")
    assert report.report["attnkit"]["version"] == attnkit.__version__
    md = report.to_markdown()
    assert "peak FMA" in md and "| tiny | highway | ok |" in md
    assert json.loads(report.to_json()) == report.report
    with pytest.raises(ValueError, match="empty list"):
        attnkit.compare([], threads=1)
    with pytest.raises(ValueError, match="no_such_suite"):
        attnkit.compare("no_such_suite", threads=1)


def test_compare_plot_needs_matplotlib_or_draws():
    report = attnkit.CompareReport(
        {
            "machine": {"cpu_model": "cpu", "threads": 1},
            "limits": {},
            "problems": [{"name": "p", "id": "p", "memory_bound": False, "results": [
                {"backend": "highway", "status": "ok", "pct_of_limit": 50.0}]}],
        }
    )
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="matplotlib"):
            report.plot()
        return
    assert report.plot() is not None


# ---- the layer ---------------------------------------------------------------


def ref_layer(x, w, heads, kv_heads, causal, context=None):
    """The layer in float64 numpy: projections, GQA attention, output (V's
    head dim from wv's shape)."""
    x = x.astype(np.float64)
    c = x if context is None else context.astype(np.float64)
    w = {k: v.astype(np.float64) for k, v in w.items()}
    B, T, D = x.shape
    S = c.shape[1]
    d = w["wq"].shape[0] // heads

    def proj(a, name, n):
        y = a @ w["w" + name].T + w.get("b" + name, 0.0)
        return y.reshape(a.shape[0], a.shape[1], n, -1).transpose(0, 2, 1, 3)

    q, k, v = proj(x, "q", heads), proj(c, "k", kv_heads), proj(c, "v", kv_heads)
    k, v = np.repeat(k, heads // kv_heads, axis=1), np.repeat(v, heads // kv_heads, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    if causal:  # bottom-right: query i sees keys j <= i + S - T
        s = np.where(np.tril(np.ones((T, S), bool), k=S - T), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, -1)
    return o @ w["wo"].T + w.get("bo", 0.0)


@pytest.mark.parametrize("backend", ["highway", "blas", "reference"])
def test_layer_matches_numpy_and_decodes_with_its_cache(backend):
    layer = attnkit.MultiHeadAttention(64, 8, 2, causal=True, bias=True, seed=1, backend=backend)
    x = rand(2, 12, 64)
    y = layer(x)
    w = layer.state_dict()
    assert sorted(w) == ["bk", "bo", "bq", "bv", "wk", "wo", "wq", "wv"]
    np.testing.assert_allclose(y, ref_layer(x, w, 8, 2, True), rtol=1e-4, atol=1e-5)
    assert layer.last_run()["backend"] == backend
    # Prefill 7 tokens, then decode 5 one at a time: the same outputs.
    cache = layer.new_cache(batch=2, capacity=16)
    parts = [layer(x[:, :7], cache=cache)] + [layer(x[:, t : t + 1], cache=cache)
                                              for t in range(7, 12)]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), y, rtol=1e-4, atol=1e-5)
    assert cache.lengths == [12, 12] and cache.capacity == 16
    assert cache.nbytes == 2 * 2 * 2 * 16 * 8 * 4
    # Roll back three tokens and decode them again.
    cache.set_lengths([9, 9])
    again = layer(x[:, 9:10], cache=cache)
    np.testing.assert_allclose(again, y[:, 9:10], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["highway", "blas", "reference"])
def test_layer_with_a_value_head_dim_of_its_own(backend):
    """value_head_dim (MLA-like): wv [G*dv, D], wo [D, H*dv]; the layer equals
    numpy, and decoding through its (paged) cache gives the same outputs."""
    layer = attnkit.MultiHeadAttention(64, 8, 2, value_head_dim=12, causal=True, bias=True,
                                       seed=5, backend=backend)
    w = layer.state_dict()
    assert w["wv"].shape == (24, 64) and w["wo"].shape == (64, 96) and w["bv"].shape == (24,)
    x = rand(2, 10, 64)
    y = layer(x)
    np.testing.assert_allclose(y, ref_layer(x, w, 8, 2, True), rtol=1e-4, atol=1e-5)
    cache = layer.new_cache(batch=2, capacity=16, page_size=16)
    parts = [layer(x[:, :6], cache=cache)] + [layer(x[:, t : t + 1], cache=cache)
                                              for t in range(6, 10)]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), y, rtol=1e-4, atol=1e-5)


def test_paged_and_int8_caches():
    layer = attnkit.MultiHeadAttention(64, 8, 2, causal=True, seed=3, backend="reference")
    x = rand(2, 24, 64)
    y = layer(x)
    # A paged cache decodes the dense cache's outputs, bit for bit here.
    def decode(cache):  # a 9-token prefill, then one token at a time
        return np.concatenate([layer(x[:, :9], cache=cache)] +
                              [layer(x[:, t : t + 1], cache=cache) for t in range(9, 24)], axis=1)

    dense = layer.new_cache(2, 24)
    paged = layer.new_cache(2, 24, page_size=16)
    assert paged.capacity == 2 * 2 * 16  # 2 pages per sequence
    got = decode(paged)
    np.testing.assert_array_equal(got, decode(dense))
    np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-5)
    with pytest.raises(MemoryError, match="out of pages"):
        layer(x[:, :9], cache=paged)  # a third page each
    assert paged.lengths == [24, 24]  # unchanged
    # Sequence 1 takes sequence 0's prompt; it then decodes sequence 0's way.
    paged.fork(0, 1, 20)
    assert paged.lengths == [24, 20]
    # int8 storage: close to f32 (quantization error, not a backend's).
    i8 = layer.new_cache(2, 24, dtype="i8", page_size=16)
    np.testing.assert_allclose(decode(i8), y, atol=0.02)
    assert i8.nbytes == 2 * 4 * 16 * 2 * (8 + 4)
    # fp8 storage (E4M3: 3 mantissa bits, E5M2: 2): close to f32, at int8's
    # bytes, and decoded on every host backend the same way.
    for dtype, tol in (("f8e4m3", 0.05), ("f8e5m2", 0.1)):
        fp8 = layer.new_cache(2, 24, dtype=dtype, page_size=16)
        got = decode(fp8)
        np.testing.assert_allclose(got, y, atol=tol)
        assert np.abs(got - y).max() > 1e-4, "an fp8 cache rounds"
        assert fp8.nbytes == 2 * 4 * 16 * 2 * (8 + 4)
    with pytest.raises(ValueError, match="page_size"):
        layer.new_cache(2, 24, num_pages=3)
    with pytest.raises(ValueError, match="power of two"):
        layer.new_cache(2, 24, page_size=24)


def test_layer_cross_attention_and_torch_weight_names():
    layer = attnkit.MultiHeadAttention(32, 4, seed=2)
    w = {
        "self_attn.q_proj.weight": rand(32, 32),
        "self_attn.k_proj.weight": rand(32, 32),
        "self_attn.v_proj.weight": rand(32, 32),
        "self_attn.o_proj.weight": rand(32, 32).astype(np.float16),
    }
    layer.load_state_dict(w)
    got = layer.state_dict()
    np.testing.assert_array_equal(got["wq"], w["self_attn.q_proj.weight"])
    np.testing.assert_array_equal(got["wo"], w["self_attn.o_proj.weight"].astype(np.float32))
    x, ctx = rand(3, 5, 32), rand(3, 11, 32)
    y = layer(x, context=ctx)
    np.testing.assert_allclose(y, ref_layer(x, got, 4, 4, False, context=ctx), rtol=1e-4,
                               atol=1e-5)
    # A [T, D] input is one sequence.
    np.testing.assert_allclose(layer(x[0]), layer(x[:1])[0], rtol=0, atol=0)


def test_layer_errors_say_what_is_wrong():
    layer = attnkit.MultiHeadAttention(64, 8, 2, causal=True)
    with pytest.raises(ValueError, match=r"x must be \[B, T, 64\]"):
        layer(rand(2, 3, 10))
    with pytest.raises(ValueError, match="float32"):
        layer(rand(2, 3, 64).astype(np.float16))
    with pytest.raises(ValueError, match=r"wq has shape \[3, 3\]"):
        layer.set_weight("wq", rand(3, 3))
    with pytest.raises(ValueError, match="no bias"):
        layer.set_weight("bq", rand(64))
    with pytest.raises(ValueError, match="no weight 'wz'"):
        layer.set_weight("wz", rand(3, 3))
    cache = layer.new_cache(1, 2)
    with pytest.raises(MemoryError, match="capacity is 2"):
        layer(rand(1, 3, 64), cache=cache)
    assert cache.lengths == [0]  # unchanged
    with pytest.raises(ValueError, match="dtype must be one of"):
        layer.new_cache(1, 2, dtype="f64")
    with pytest.raises(ValueError, match="not a multiple"):
        attnkit.MultiHeadAttention(65, 8)
    with pytest.raises(ValueError, match="unknown backend"):
        attnkit.MultiHeadAttention(64, 8, backend="nope")


def test_layer_compute_fast_over_a_bf16_cache():
    x = rand(2, 12, 64)
    exact = attnkit.MultiHeadAttention(64, 8, 2, causal=True, seed=4, backend="highway")
    fast = attnkit.MultiHeadAttention(64, 8, 2, causal=True, seed=4, backend="highway",
                                      compute="fast")
    assert exact.config.compute == "COMPUTE_UNSPECIFIED" and fast.config.compute == "FAST"
    assert "compute='fast'" in repr(fast) and "compute='exact'" in repr(exact)
    want = ref_layer(x, exact.state_dict(), 8, 2, True)

    def decode(layer):  # a 5-token prefill, then one token at a time, over bf16 K/V
        cache = layer.new_cache(2, 12, dtype="bf16")
        return np.concatenate([layer(x[:, :5], cache=cache)] +
                              [layer(x[:, t : t + 1], cache=cache) for t in range(5, 12)], axis=1)

    got_exact, got_fast = decode(exact), decode(fast)
    # bf16 storage of K and V, and under FAST of the queries too: close to
    # f64, not equal to each other.
    np.testing.assert_allclose(got_exact, want, atol=0.02)
    np.testing.assert_allclose(got_fast, want, atol=0.02)
    assert not np.array_equal(got_fast, got_exact)
    assert fast.last_run()["backend"] == "highway"
    # f32 K/V: nothing to round, FAST is EXACT.
    np.testing.assert_array_equal(fast(x), exact(x))
    # From a config, and compute= over the config's.
    cfg = fast.config
    assert attnkit.MultiHeadAttention(config=cfg).config.compute == "FAST"
    assert attnkit.MultiHeadAttention(config=cfg, compute="exact").config.compute == "EXACT"
    # blas computes only EXACT: a bf16 cache under FAST is refused at the call.
    blas = attnkit.MultiHeadAttention(64, 8, 2, causal=True, backend="blas", compute="fast")
    with pytest.raises(NotImplementedError, match="compute FAST with kv_dtype bf16"):
        blas(x[:, :5], cache=blas.new_cache(2, 12, dtype="bf16"))
    with pytest.raises(ValueError, match="compute must be 'exact' or 'fast'; got 'turbo'"):
        attnkit.MultiHeadAttention(64, 8, compute="turbo")


def test_check_and_compare_report_the_compute_mode():
    cfg = attnkit.AttentionConfig(num_heads=4, num_kv_heads=2, head_dim=32, q_len=9, kv_len=20,
                                  mask="causal", alignment="BOTTOM_RIGHT", dtype="bf16",
                                  compute="fast")
    report = attnkit.check(cfg, backends=["highway", "blas", "reference"])
    assert report.id.endswith("_bf16_fast") and report.compute == "fast"
    assert report.config.compute == "FAST"
    assert report["highway"]["status"] == "pass", report.to_markdown()
    assert report["reference"]["status"] == "pass"
    assert report["blas"]["status"] == "unsupported"
    assert "compute FAST with kv_dtype bf16" in report["blas"]["detail"]
    assert "compute fast" in report.to_markdown()
    assert attnkit.check(cfg.replace(compute="EXACT"), backends="blas").compute == "exact"
    tiny = cfg.replace(name="tiny", q_len=4, kv_len=4)
    records = attnkit.compare(tiny, backends=["highway"], threads=1).records()
    assert [r["compute"] for r in records] == ["fast", "fast"]  # highway, auto
    assert records[0]["status"] == "ok" and records[0]["id"].endswith("_fast")


# ---- memory placement --------------------------------------------------------


def test_host_arrays_never_reach_a_device_backend(monkeypatch):
    from attnkit import _ops

    # A device backend as the library would list it (none is built into the
    # test context): host arrays named to it are refused before any call.
    table = dict(_ops._backend_memory())
    table["gpu"] = ("device", True, "")
    monkeypatch.setattr(_ops, "_memory", table)
    q = rand(1, 2, 4, 16)
    with pytest.raises(ValueError, match="'gpu' reads device memory"):
        attnkit.scaled_dot_product_attention(q, q, q, backend="gpu")
    with pytest.raises(ValueError, match="'gpu' reads device memory"):
        attnkit.attention(q, q, q, backend="gpu")
    # auto stays on the host for host arrays.
    attnkit.scaled_dot_product_attention(q, q, q)
    assert _ops._backend_memory()[attnkit.last_run()["backend"]][0] == "host"


def _cuda_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.mark.skipif(_cuda_torch() is None, reason="no torch with a CUDA device here")
def test_cuda_tensors_run_on_the_device_backend():
    torch = _cuda_torch()
    q = torch.rand(2, 8, 64, 64, device="cuda", dtype=torch.float16)
    k = torch.rand(2, 2, 64, 64, device="cuda", dtype=torch.float16)
    o = attnkit.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
    assert o.is_cuda and o.dtype == torch.float16
    assert _ops_memory()[attnkit.last_run()["backend"]][0] == "device"
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(4, 1), k.float().repeat_interleave(4, 1),
        is_causal=True)
    torch.testing.assert_close(o.float(), want, rtol=2e-3, atol=2e-3)
    with pytest.raises(ValueError, match="runs on the host"):
        attnkit.scaled_dot_product_attention(q, k, k, enable_gqa=True, backend="highway")


def _ops_memory():
    from attnkit import _ops

    return _ops._backend_memory()


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if int(torch.__version__.split(".")[0]) >= 2 else None


@pytest.mark.skipif(_torch() is None, reason="torch >= 2.0 is not importable here")
def test_layer_matches_torch_multihead_attention():
    torch = _torch()
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(64, 8, bias=True, batch_first=True)
    layer = attnkit.MultiHeadAttention(64, 8, bias=True)
    w, b = ref.in_proj_weight.detach(), ref.in_proj_bias.detach()
    layer.load_state_dict({
        "wq": w[:64], "wk": w[64:128], "wv": w[128:],
        "bq": b[:64], "bk": b[64:128], "bv": b[128:],
        "out_proj.weight": ref.out_proj.weight, "out_proj.bias": ref.out_proj.bias,
    })
    x = torch.randn(2, 10, 64)
    y = layer(x)
    assert isinstance(y, torch.Tensor)
    want, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(y, want.detach(), rtol=1e-4, atol=1e-5)


# ---- suite, cost, limits, bench ----------------------------------------------


def test_suite_cost_and_machine_limits():
    configs = attnkit.suite("standard")
    assert len(configs) >= 9 and all(isinstance(c, attnkit.AttentionConfig) for c in configs)
    decode = next(c for c in configs if c.q_len == 1)
    cost = decode.cost()
    h, g, tk, d = decode.num_heads, decode.num_kv_heads, decode.kv_len, decode.head_dim
    b = decode.batch or 1
    assert cost["useful_flops"] == 4 * d * b * h * tk
    assert cost["kv_cache_bytes"] == 2 * b * g * tk * d * (2 if decode.kv_dtype == "BF16" else 4)
    with pytest.raises(ValueError, match="unknown"):
        attnkit.suite("nope")
    info = attnkit.machine_limits(threads=1)
    assert info["machine"]["threads"] == 1 and info["limits"]["read_gbps"] > 0


def test_bench_runs_torch_free_on_a_config(tmp_path, capsys):
    from attnkit import bench

    cfg = attnkit.AttentionConfig(name="tiny window", num_heads=2, head_dim=16, q_len=24,
                                  batch=2, kv_lengths=[24, 10],
                                  mask={"kind": "SLIDING_WINDOW", "window_left": 4})
    bench.run(False, 2, [cfg], 1, with_reference=True)
    out = capsys.readouterr().out
    assert "peak FMA" in out and "tiny window" in out and "reference" in out
    # torch's mask for the same problem: keys [i - 4, i] (bottom-right, Tq = Tk).
    vis = bench._visible(cfg)
    assert vis[10, 6] and vis[10, 10] and not vis[10, 5] and not vis[10, 11]
    # Sequence 1 holds 10 keys: its diagonal moves to i + 10 - 24 (bottom-right).
    short = bench._visible(cfg, 10)
    assert short[23, 9] and short[23, 5] and not short[23, 4] and not short[13, 0]
    assert not short[:, 10:].any()


@pytest.mark.skipif(_torch() is None, reason="torch >= 2.0 is not importable here")
def test_bench_gives_torch_the_same_problem():
    from attnkit import bench

    torch = _torch()
    cfg = attnkit.AttentionConfig(num_heads=4, num_kv_heads=2, head_dim=32, q_len=12, kv_len=30,
                                  batch=2, kv_lengths=[30, 17], alignment="BOTTOM_RIGHT",
                                  mask={"kind": "SLIDING_WINDOW", "window_left": 6})
    prob = bench._Problem(cfg, torch)
    ours = prob.attnkit("highway")
    theirs = prob.torch(torch).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_versions_agree():
    # The VERSION file (the checkout's, whatever the working directory), the
    # package and the library it loaded.
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "VERSION")) as f:
        version = f.read().strip()
    assert attnkit.__version__ == version
    assert attnkit.library_version().startswith(f"attnkit {version} (commit ")


def test_config_errors_name_the_field():
    # Enum names are checked with the field's full path, nested ones too.
    with pytest.raises(ValueError, match="^dtype must be one of"):
        attnkit.AttentionConfig(dtype="f64")
    with pytest.raises(ValueError, match="^mask.kind must be one of"):
        attnkit.AttentionConfig(mask={"kind": "diagonal"})
    with pytest.raises(ValueError, match="mask must be a MaskSpec"):
        attnkit.AttentionConfig(mask=None)
    assert attnkit.AttentionConfig(mask="causal").mask.kind == "CAUSAL"
