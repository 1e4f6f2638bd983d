/* attnkit from C: list the backends, run one grouped-query causal attention
 * on host buffers with "auto" and with every available host backend, check
 * that they agree with "reference", and show an error message. Built and run
 * as a test (//examples:attention_c_test); exits non-zero on any failure.
 *
 *   bazel run //examples:attention_c
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnkit/attnkit.h"

enum { B = 1, H = 8, G = 2, T = 64, D = 64 };

/* A dense row-major [d0, d1, d2, d3] f32 view of `data`. */
static attnkit_tensor View(float* data, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  attnkit_tensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = ATTNKIT_F32;
  t.rank = 4;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.shape[2] = d2;
  t.shape[3] = d3;
  t.strides[3] = 1;
  t.strides[2] = d3;
  t.strides[1] = d2 * d3;
  t.strides[0] = d1 * d2 * d3;
  return t;
}

/* A dense [d0, d1, d2] f32 view (the log-sum-exp, [B, H, Tq]). */
static attnkit_tensor View3(float* data, int64_t d0, int64_t d1, int64_t d2) {
  attnkit_tensor t = View(data, d0, d1, d2, 1);
  t.rank = 3;
  t.shape[3] = 0;
  t.strides[3] = 0;
  t.strides[2] = 1;
  t.strides[1] = d2;
  t.strides[0] = d1 * d2;
  return t;
}

static void Fill(float* x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
  }
}

int main(void) {
  char err[1024];
  attnkit_context* ctx = NULL;
  printf("%s\n", attnkit_version());
  if (attnkit_context_create(NULL, &ctx, err, sizeof(err)) != ATTNKIT_OK) {
    fprintf(stderr, "context: %s\n", err);
    return 1;
  }

  /* The backends and what they can do. */
  const int32_t n = attnkit_num_backends(ctx);
  for (int32_t i = 0; i < n; ++i) {
    attnkit_backend_info info;
    info.struct_size = sizeof(info);
    if (attnkit_backend_info_get(ctx, i, &info, err, sizeof(err)) != ATTNKIT_OK) {
      fprintf(stderr, "backend %d: %s\n", i, err);
      return 1;
    }
    printf("backend %-10s %s, head dims %lld..%lld, lse %d, %s\n", info.name,
           info.available == ATTNKIT_OK ? "available" : info.unavailable_reason,
           (long long)info.caps.min_head_dim, (long long)info.caps.max_head_dim, info.caps.lse,
           info.uses_host_memory ? "host memory" : "device memory");
  }

  /* GQA (8 query heads over 2 KV heads), causal, with the log-sum-exp. */
  attnkit_problem p;
  attnkit_problem_init(&p);
  p.batch = B;
  p.num_heads = H;
  p.num_kv_heads = G;
  p.q_len = p.kv_len = T;
  p.head_dim = D;
  p.mask = ATTNKIT_MASK_CAUSAL;
  p.return_lse = 1;
  p.name = "c_example_gqa";

  static float q[B * H * T * D], k[B * G * T * D], v[B * G * T * D];
  static float o[B * H * T * D], lse[B * H * T], o_ref[B * H * T * D], lse_ref[B * H * T];
  Fill(q, sizeof(q) / sizeof(float), 1);
  Fill(k, sizeof(k) / sizeof(float), 2);
  Fill(v, sizeof(v) / sizeof(float), 3);

  attnkit_args args;
  memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.q = View(q, B, H, T, D);
  args.k = View(k, B, G, T, D);
  args.v = View(v, B, G, T, D);
  args.o = View(o_ref, B, H, T, D);
  args.lse = View3(lse_ref, B, H, T);

  attnkit_run_result result;
  result.struct_size = sizeof(result);
  if (attnkit_run(ctx, "reference", &p, &args, &result, err, sizeof(err)) != ATTNKIT_OK) {
    fprintf(stderr, "reference: %s\n", err);
    return 1;
  }

  /* "auto" and every available host backend against the reference. */
  int failures = 0;
  for (int32_t i = -1; i < n; ++i) {
    const char* name = "auto";
    attnkit_backend_info info;
    info.struct_size = sizeof(info);
    if (i >= 0) {
      attnkit_backend_info_get(ctx, i, &info, err, sizeof(err));
      if (info.available != ATTNKIT_OK || !info.uses_host_memory) continue;
      name = info.name;
    }
    args.o.data = o;
    args.lse.data = lse;
    memset(o, 0, sizeof(o));
    if (attnkit_run(ctx, name, &p, &args, &result, err, sizeof(err)) != ATTNKIT_OK) {
      fprintf(stderr, "%s: %s\n", name, err);
      ++failures;
      continue;
    }
    double max_o = 0, max_lse = 0;
    for (size_t e = 0; e < sizeof(o) / sizeof(float); ++e) {
      max_o = fmax(max_o, fabs((double)o[e] - o_ref[e]));
    }
    for (size_t e = 0; e < sizeof(lse) / sizeof(float); ++e) {
      max_lse = fmax(max_lse, fabs((double)lse[e] - lse_ref[e]));
    }
    const int ok = max_o < 1e-4 && max_lse < 1e-4;
    printf("%-10s ran %s [%s]: max |o - ref| %.2e, max |lse - ref| %.2e %s\n  why: %s\n", name,
           result.backend, result.kernel, max_o, max_lse, ok ? "ok" : "MISMATCH", result.reason);
    failures += !ok;
  }

  /* Errors name the field, its value and the rule. */
  p.num_heads = 12;
  p.num_kv_heads = 5;
  const int32_t code = attnkit_problem_validate(&p, err, sizeof(err));
  printf("invalid problem: code %d: %s\n", code, err);
  if (code != ATTNKIT_INVALID_ARGUMENT || strstr(err, "num_kv_heads") == NULL) ++failures;

  attnkit_context_destroy(ctx);
  if (failures > 0) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
