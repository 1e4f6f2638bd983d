"""End to end on the CPU: a random-initialised Llama-style model generating
with Transformers, its attention run by "attnkit", "sdpa" and "eager" in
turn (python -m attnkit.bench --model; needs torch and transformers).

For each implementation: the prefill of a prompt (ms), then greedy decode
steps through the KV cache (tokens/s), and the share of each phase spent
inside the attention function (timed around every call of it, through a
wrapper registered in Transformers' attention registry). The same weights,
prompt and thread count serve every implementation; decode tokens are
checked equal across them (a faster but different run would not count).
"""

import time


def _config(transformers, size):
    """The model: "0.5b" (the default: 28 layers, d_model 1024, 16 query and
    4 KV heads of 64, MLP 4096, vocab 32000: about 0.49e9 parameters) or
    "tiny" (for a quick check)."""
    if size == "tiny":
        return transformers.LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, max_position_embeddings=4096)
    return transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=4096,
                                    num_hidden_layers=28, num_attention_heads=16,
                                    num_key_value_heads=4, max_position_embeddings=4096)


class _AttentionTimer:
    """Registers "timed-NAME" for each implementation: its attention function
    (and mask builder) wrapped so that the seconds inside it add up."""

    def __init__(self, transformers):
        from transformers import masking_utils
        from transformers.models.llama import modeling_llama

        from .integrations import transformers as akt

        akt.register()
        functions = {
            "attnkit": akt.attention_forward,
            "sdpa": transformers.AttentionInterface._global_mapping["sdpa"],
            "eager": modeling_llama.eager_attention_forward,
        }
        masks = masking_utils.AttentionMaskInterface._global_mapping
        self.seconds = 0.0
        self.calls = 0
        for name, fn in functions.items():
            transformers.AttentionInterface.register(f"timed-{name}", self._wrap(fn))
            masking_utils.AttentionMaskInterface.register(f"timed-{name}", masks[name])

    def _wrap(self, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        return timed

    def reset(self):
        self.seconds, self.calls = 0.0, 0


def run(size="0.5b", prompt=1024, new_tokens=128, dtype="float32", threads=0,
        implementations=("attnkit", "sdpa", "eager")):
    import torch
    import transformers

    from . import _ops

    if threads:
        torch.set_num_threads(threads)
        for b in ("highway", "blas"):
            _ops.set_num_threads(b, threads)
    timer = _AttentionTimer(transformers)
    torch.manual_seed(0)
    cfg = _config(transformers, size)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(3, cfg.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(1))
    print(f"model: Llama-style, {params / 1e9:.2f}e9 parameters, {cfg.num_hidden_layers} layers, "
          f"{cfg.num_attention_heads}/{cfg.num_key_value_heads} heads of "
          f"{cfg.hidden_size // cfg.num_attention_heads}, {dtype}; prompt {prompt} tokens, "
          f"{new_tokens} generated greedily; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}), transformers {transformers.__version__}")
    rows, tokens = [], {}
    for impl in implementations:
        model.set_attn_implementation(f"timed-{impl}")
        with torch.no_grad():
            model(ids[:, :32])  # warm-up: first calls, thread pools, page faults
            timer.reset()
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            prefill_s = time.perf_counter() - t0
            prefill_attn = timer.seconds
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            generated = [token]
            timer.reset()
            t0 = time.perf_counter()
            for _ in range(new_tokens - 1):
                out = model(token, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                token = out.logits[:, -1:].argmax(-1)
                generated.append(token)
            decode_s = time.perf_counter() - t0
            decode_attn = timer.seconds
        tokens[impl] = torch.cat(generated, dim=1)
        rows.append((impl, prefill_s * 1e3, (new_tokens - 1) / decode_s,
                     100 * prefill_attn / prefill_s, 100 * decode_attn / decode_s,
                     prefill_attn * 1e3, decode_attn * 1e3 / max(new_tokens - 1, 1)))
    base = {r[0]: r for r in rows}.get("sdpa")
    print()
    print("| attention | prefill ms | decode tok/s | attention share prefill | attention share "
          "decode | attention ms prefill | attention ms/token | prefill vs sdpa | decode vs sdpa |")
    print("|---|---|---|---|---|---|---|---|---|")
    for impl, pre, tps, share_p, share_d, attn_p, attn_d in rows:
        vs_p = f"{base[1] / pre:.2f}x" if base else "-"
        vs_d = f"{tps / base[2]:.2f}x" if base else "-"
        print(f"| {impl} | {pre:.0f} | {tps:.2f} | {share_p:.1f} % | {share_d:.1f} % | "
              f"{attn_p:.0f} | {attn_d:.2f} | {vs_p} | {vs_d} |")
    first = implementations[0]
    same = all(torch.equal(tokens[first], tokens[i]) for i in implementations)
    print(f"\ngenerated tokens identical across {', '.join(implementations)}: {same}")
    return rows, same
