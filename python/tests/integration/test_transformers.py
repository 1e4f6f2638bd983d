"""attnkit as a Transformers attention backend, on real model code: tiny
random-initialised Llama (GQA), Mistral (sliding window), Gemma 2 (softcap,
alternating sliding and full layers) and Qwen 2 models built from configs,
nothing downloaded. Each is run with attn_implementation "attnkit" and
compared with Transformers' own "eager" (and "sdpa", which refuses Gemma 2's
softcap) on the same weights.

Bounds, f32: logits within 1e-4 absolute of the reference implementation's
(the attention outputs differ by float rounding, about 1e-7, and a 2-layer
model amplifies that little); gradients of a training step within 1e-4
relative to the largest gradient of each parameter; greedy generation gives
identical tokens. bf16: logits within 2 % of the logits' largest magnitude
(bf16 keeps 8 bits; attnkit accumulates in f32, as torch's math path does).

Run by tools/integration_test.sh, in its cached virtual environment.
"""

import pytest

# Skipped, not failed, where torch or Transformers is missing (the package's
# own suite collects this folder too).
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attnkit  # noqa: E402
import attnkit.integrations.transformers as akt  # noqa: E402

akt.register()

VOCAB = 96
PROMPT = 20  # longer than the sliding windows below
NEW_TOKENS = 32


def _common():
    return dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                pad_token_id=0, bos_token_id=1, eos_token_id=2)


def llama():
    return transformers.LlamaConfig(**_common())


def mistral():
    return transformers.MistralConfig(sliding_window=8, **_common())


def gemma2():
    # A small softcap so that it changes the result: with 50 (the real
    # models') tiny random weights never reach it.
    # models') tiny random weights never reach it, and weights drawn wider
    # (initializer_range) so that scores do.
    return transformers.Gemma2Config(head_dim=16, sliding_window=8, attn_logit_softcapping=2.0,
                                     final_logit_softcapping=30.0, query_pre_attn_scalar=16,
                                     initializer_range=0.5, **_common())


def qwen2():
    return transformers.Qwen2Config(use_sliding_window=False, **_common())


CONFIGS = {"llama": llama, "mistral": mistral, "gemma2": gemma2, "qwen2": qwen2}
# Gemma 2's softcap is refused by Transformers' "sdpa".
REFERENCES = {"llama": ["eager", "sdpa"], "mistral": ["eager", "sdpa"], "gemma2": ["eager"],
              "qwen2": ["eager", "sdpa"]}


def _model(name, dtype=torch.float32):
    torch.manual_seed(0)
    cfg = CONFIGS[name]()
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="attnkit",
                                                          dtype=dtype)
    return model.eval()


def _ids(batch=2, length=PROMPT, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


def _logits(model, impl, ids, mask=None):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


@pytest.mark.parametrize("name", CONFIGS)
def test_logits_match_the_reference_implementations(name):
    model = _model(name)
    ids = _ids()
    ours = _logits(model, "attnkit", ids)
    assert attnkit.last_run()["backend"] in ("highway", "blas", "onednn", "reference")
    for impl in REFERENCES[name]:
        ref = _logits(model, impl, ids)
        err = (ours - ref).abs().max().item()
        assert err <= 1e-4, f"{name}: logits differ from {impl!r} by {err}"


@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_generation_gives_identical_tokens(name):
    model = _model(name)
    ids = _ids(batch=1)
    out = {}
    for impl in ["attnkit"] + REFERENCES[name]:
        model.set_attn_implementation(impl)
        out[impl] = model.generate(ids, attention_mask=torch.ones_like(ids),
                                   max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                   do_sample=False)
    assert out["attnkit"].shape[1] == PROMPT + NEW_TOKENS
    for impl in REFERENCES[name]:
        assert torch.equal(out["attnkit"], out[impl]), f"{name}: tokens differ from {impl!r}"


@pytest.mark.parametrize("name", CONFIGS)
def test_left_padded_batched_generation_matches(name):
    model = _model(name)
    ids = _ids(batch=3)
    mask = torch.ones_like(ids)
    for row, pad in ((0, 5), (2, 11)):  # left padding of different lengths
        ids[row, :pad] = model.config.pad_token_id
        mask[row, :pad] = 0
    out = {}
    for impl in ["attnkit"] + REFERENCES[name]:
        model.set_attn_implementation(impl)
        out[impl] = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                                   min_new_tokens=NEW_TOKENS, do_sample=False)
    for impl in REFERENCES[name]:
        assert torch.equal(out["attnkit"], out[impl]), f"{name}: tokens differ from {impl!r}"
    # The padded row generates what it generates alone, unpadded.
    model.set_attn_implementation("attnkit")
    alone = model.generate(ids[2:, 11:], attention_mask=mask[2:, 11:],
                           max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    assert torch.equal(out["attnkit"][2, PROMPT:], alone[0, PROMPT - 11:])


@pytest.mark.parametrize("name", CONFIGS)
def test_training_step_gradients_match(name):
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # a padded sequence too, whose padding is left out of the loss:
    # its query rows see no key, which attnkit and PyTorch's SDPA make zero
    # and eager averages over the masked keys (don't-cares no real row sees).
    # The last pad's logits predict the first real token, so that label goes.
    labels = ids.clone()
    labels[1, :5] = -100
    grads = {}
    for impl in ["attnkit", "eager"]:
        model = _model(name).train()
        model.set_attn_implementation(impl)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        grads[impl] = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert grads["attnkit"].keys() == grads["eager"].keys()
    for n, g in grads["attnkit"].items():
        ref = grads["eager"][n]
        scale = ref.abs().max().item() or 1.0
        err = (g - ref).abs().max().item() / scale
        assert err <= 1e-4, f"{name}: d{n} differs from eager's by {err} (relative)"


def test_softcap_reaches_the_kernel():
    """The Gemma 2 check can fail: dropping the softcap moves the logits
    far past the bound."""
    model = _model("gemma2")
    ids = _ids()
    ref = _logits(model, "eager", ids)

    def without_softcap(*args, **kwargs):
        kwargs["softcap"] = None
        return akt.attention_forward(*args, **kwargs)

    transformers.AttentionInterface.register("attnkit-nosoftcap", without_softcap)
    transformers.masking_utils.AttentionMaskInterface.register(
        "attnkit-nosoftcap", transformers.masking_utils.sdpa_mask)
    wrong = _logits(model, "attnkit-nosoftcap", ids)
    assert (wrong - ref).abs().max().item() > 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_models(dtype):
    model = _model("llama", dtype=dtype)
    ids = _ids()
    ours = _logits(model, "attnkit", ids)
    ref = _logits(model, "sdpa", ids)
    bound = 0.02 * ref.abs().max().item()
    assert (ours - ref).abs().max().item() <= bound
    model.set_attn_implementation("attnkit")
    out = model.generate(ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=8,
                         min_new_tokens=8, do_sample=False)
    assert out.shape == (1, PROMPT + 8)


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_compiled_model_has_no_graph_breaks(compiler):
    """fullgraph=True fails at the first graph break; aot_eager also runs
    the operator's fake implementation and autograd formula through
    AOTAutograd, inductor generates the model's other kernels."""
    model = _model("llama")
    ids = _ids()
    eager = _logits(model, "attnkit", ids)
    compiled = torch.compile(model, fullgraph=True, backend=compiler)
    with torch.no_grad():
        out = compiled(input_ids=ids).logits.float()
    assert (out - eager).abs().max().item() <= 1e-5
    if compiler == "inductor":
        return
    # and its gradients, through the operator's autograd formula
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    eager_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    compiled(input_ids=ids, labels=ids).loss.backward()
    for n, p in model.named_parameters():
        scale = eager_grads[n].abs().max().item() or 1.0
        assert (p.grad - eager_grads[n]).abs().max().item() <= 1e-4 * scale, n


def test_attention_dropout_in_training_is_refused():
    torch.manual_seed(0)
    cfg = llama()
    cfg.attention_dropout = 0.1
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="attnkit")
    model.train()
    with pytest.raises(NotImplementedError, match="dropout"):
        model(input_ids=_ids())
    model.eval()  # no dropout at inference: runs
    model(input_ids=_ids())


def _gpt_oss():
    cfg_class = getattr(transformers, "GptOssConfig", None)
    if cfg_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no gpt-oss")
    torch.manual_seed(0)
    cfg = cfg_class(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    num_local_experts=2, num_experts_per_tok=1, sliding_window=8,
                    pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="attnkit")
    with torch.no_grad():  # sinks that take a real share of each row (init gives ~0)
        for layer in model.model.layers:
            layer.self_attn.sinks.uniform_(0.0, 3.0)
    return model.eval()


def test_gpt_oss_attention_sinks_match_eager():
    """gpt-oss's per-head sinks (s_aux): logits and greedy tokens as eager's,
    alternating sliding-window and full layers; a model whose sinks are -inf
    (none) differs, so the sinks are really applied."""
    model = _gpt_oss()
    ids = _ids()
    with torch.no_grad():
        got = model(input_ids=ids).logits
        model.set_attn_implementation("eager")
        want = model(input_ids=ids).logits
        want_tokens = model.generate(ids, attention_mask=torch.ones_like(ids),
                                     max_new_tokens=16, do_sample=False)
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(float("-inf"))
        model.set_attn_implementation("attnkit")
        without = model(input_ids=ids).logits
    assert (got - want).abs().max().item() < 1e-4
    assert (without - want).abs().max().item() > 1e-2, "the sinks change nothing: a weak test"
    model = _gpt_oss()
    with torch.no_grad():
        tokens = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16,
                                do_sample=False)
    assert torch.equal(tokens, want_tokens)


def test_gpt_oss_training_gradients_match_eager():
    """A training step through sinks: every parameter's gradient, the sinks'
    own included, as eager's; the sinks' gradient is not zero."""
    ids = _ids()
    grads = {}
    for impl in ["attnkit", "eager"]:
        model = _gpt_oss().train()
        model.set_attn_implementation(impl)
        model(input_ids=ids, labels=ids).loss.backward()
        grads[impl] = {n: p.grad.clone() for n, p in model.named_parameters()
                       if p.grad is not None}
    assert grads["attnkit"].keys() == grads["eager"].keys()
    sinks = [n for n in grads["eager"] if n.endswith("self_attn.sinks")]
    assert sinks and all(grads["eager"][n].abs().max().item() > 1e-6 for n in sinks)
    for n, g in grads["attnkit"].items():
        ref = grads["eager"][n]
        scale = ref.abs().max().item() or 1.0
        err = (g - ref).abs().max().item() / scale
        assert err <= 1e-4, f"gpt-oss: d{n} differs from eager's by {err} (relative)"
