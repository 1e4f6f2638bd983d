"""attnkit as a Hugging Face Transformers attention backend.

    import attnkit.integrations.transformers as akt
    akt.register()                      # adds "attnkit" to Transformers' registries
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="attnkit")
    # or model.set_attn_implementation("attnkit") on a loaded model

Every attention layer of a model whose attention goes through Transformers'
AttentionInterface (Llama, Mistral, Gemma 2, Qwen 2 and most current
decoders) then runs `attnkit::sdpa` (attnkit._torch_op): a torch.library
operator, so torch.compile(model, fullgraph=True) traces through it, with
attnkit's backward pass for training. What it takes, as the models pass it:

  - grouped-query heads, without repeating K/V;
  - the 4-d boolean masks Transformers builds (True = attend: causal,
    padding, sliding window, packed sequences), and the mask-free causal
    path (no mask, is_causal): masks come from Transformers' own "sdpa" mask
    builder, registered for "attnkit" too;
  - `scaling`, and Gemma 2's `softcap` (attn_logit_softcapping);
  - the KV cache of generate(): decode steps are one query row against the
    cache, whatever its length;
  - gpt-oss's attention sinks (`s_aux`, one logit per head), with their
    gradient when training;
  - f32, bf16 and f16 models.

What it refuses, with attnkit's message rather than a silent difference:
dropout while training (attention_dropout > 0), T5-style position_bias on a
mask, and output_attentions.
"""

import torch

from .. import _torch_op

NAME = "attnkit"


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, softcap=None, sliding_window=None, backend="auto",
                      **kwargs):
    """Transformers' attention-function signature: query [B, Hq, L, E], key
    and value [B, Hkv, S, E], attention_mask None or [B, 1|Hq, L, S] (bool,
    True = attend, or float, added). Returns (out [B, L, Hq, E], None).
    sliding_window is already in the mask Transformers built for the layer
    (or the keys all fit in the window when it built none)."""
    if dropout:
        raise NotImplementedError(
            f"attention dropout {dropout}: attnkit computes attention without dropout; set the "
            "config's attention_dropout to 0.0 or train with attn_implementation='sdpa'"
        )
    # gpt-oss passes its per-head sink logits as s_aux.
    sinks = kwargs.get("s_aux")
    if sinks is None:
        sinks = kwargs.get("sinks")
    if kwargs.get("position_bias") is not None:
        raise NotImplementedError(
            "position_bias: pass the bias as a float attention mask; attnkit's Transformers "
            "backend does not combine it with the mask"
        )
    if kwargs.get("output_attentions"):
        raise NotImplementedError(
            "output_attentions=True: attnkit never forms the attention weights; use "
            "attn_implementation='eager' to return them"
        )
    q_len = query.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # As Transformers' sdpa path: the causal flag stands in for a mask only
    # when no mask was built and there is more than one query row (a decode
    # row sees the whole cache). PyTorch's is_causal is top-left, so keys
    # past the query length are never seen, as if cropped.
    causal = bool(q_len > 1 and attention_mask is None and causal)
    enable_gqa = query.shape[1] != key.shape[1]
    out, _ = _torch_op.sdpa(query, key, value, attention_mask, causal, scaling,
                            float(softcap or 0.0), enable_gqa, backend, sinks)
    return out.transpose(1, 2).contiguous(), None


def register(name=NAME):
    """Adds `name` ("attnkit") to Transformers' attention-function registry
    (AttentionInterface) and its mask-builder registry (the boolean masks of
    its "sdpa" path, with the mask-free causal skip). Idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
