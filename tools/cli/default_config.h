#ifndef ATTNKIT_TOOLS_CLI_DEFAULT_CONFIG_H_
#define ATTNKIT_TOOLS_CLI_DEFAULT_CONFIG_H_

namespace attnkit {

// The problem `attnkit check` runs without --config: grouped-query attention
// (16 query heads over 4 KV heads), causal, a 512-token prefill, d = 64.
inline constexpr char kDefaultConfigText[] = R"pb(
  name: "default-gqa-causal-prefill"
  num_heads: 16
  num_kv_heads: 4
  head_dim: 64
  batch: 1
  q_len: 512
  kv_len: 512
  mask { kind: CAUSAL }
  alignment: BOTTOM_RIGHT
  return_lse: true
  seed: 1
)pb";

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_CLI_DEFAULT_CONFIG_H_
