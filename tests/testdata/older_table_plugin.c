/* A backend plugin written in plain C whose function table is older than
 * this attnkit's: it stops after `forward` (the required functions), so the
 * host must treat it as an always-available, single-threaded host backend
 * and refuse SetStream by name. It computes real attention (f32, BHTD, no
 * mask, any GQA group) in the most direct way, so the registry test can
 * hold it to the reference. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "attnkit/plugin.h"

typedef struct {
  int unused;
} NaiveBackend;

static NaiveBackend kInstance;

static void Destroy(void* self) { (void)self; }
static const char* Name(void* self) {
  (void)self;
  return "c-naive";
}
static const char* Description(void* self) {
  (void)self;
  return "plain-C naive attention (f32, BHTD, no mask), built against an older table";
}
static void Capabilities(void* self, attnkit_caps* caps) {
  (void)self;
  caps->dtypes = caps->kv_dtypes = 1u << ATTNKIT_F32;
  caps->masks = 1u << ATTNKIT_MASK_NONE;
  caps->alignments = (1u << ATTNKIT_ALIGN_TOP_LEFT) | (1u << ATTNKIT_ALIGN_BOTTOM_RIGHT);
  caps->layouts = 1u << ATTNKIT_LAYOUT_BHTD;
  caps->min_head_dim = 1;
  caps->max_head_dim = 256;
}

static float At(const attnkit_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const float* d = (const float*)t->data;
  return d[i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] + i3 * t->strides[3]];
}

static int32_t Forward(void* self, const attnkit_problem* p, const attnkit_args* a,
                       attnkit_run_info* info, char* err, size_t err_size) {
  (void)self;
  if (p->head_dim > 256) {
    snprintf(err, err_size, "head_dim %lld is above 256", (long long)p->head_dim);
    return ATTNKIT_INVALID_ARGUMENT;
  }
  const int64_t group = p->num_heads / p->num_kv_heads;
  float* o = (float*)a->o.data;
  for (int64_t b = 0; b < p->batch; ++b) {
    for (int64_t h = 0; h < p->num_heads; ++h) {
      for (int64_t i = 0; i < p->q_len; ++i) {
        double max = -INFINITY, sum = 0, acc[256] = {0};
        for (int64_t j = 0; j < p->kv_len; ++j) {
          double s = 0;
          for (int64_t c = 0; c < p->head_dim; ++c) {
            s += (double)At(&a->q, b, h, i, c) * At(&a->k, b, h / group, j, c);
          }
          s *= p->scale;
          const double m = s > max ? s : max;
          const double alpha = exp(max - m), w = exp(s - m);
          sum = sum * alpha + w;
          for (int64_t c = 0; c < p->head_dim; ++c) {
            acc[c] = acc[c] * alpha + w * At(&a->v, b, h / group, j, c);
          }
          max = m;
        }
        for (int64_t c = 0; c < p->head_dim; ++c) {
          o[b * a->o.strides[0] + h * a->o.strides[1] + i * a->o.strides[2] + c * a->o.strides[3]] =
              (float)(sum > 0 ? acc[c] / sum : 0);
        }
      }
    }
  }
  snprintf(info->kernel, sizeof(info->kernel), "naive-c");
  return ATTNKIT_OK;
}

/* The table as an older plugin would have it: struct_size ends after forward. */
static const attnkit_backend_ops kOps = {offsetof(attnkit_backend_ops, available),
                                         &Destroy,
                                         &Name,
                                         &Description,
                                         &Capabilities,
                                         &Forward};

static int32_t Create(uint32_t index, void** self, const attnkit_backend_ops** ops, char* err,
                      size_t err_size) {
  if (index != 0) {
    snprintf(err, err_size, "no backend %u", index);
    return ATTNKIT_NOT_FOUND;
  }
  *self = &kInstance;
  *ops = &kOps;
  return ATTNKIT_OK;
}

static const attnkit_plugin kPlugin = {sizeof(attnkit_plugin), ATTNKIT_PLUGIN_ABI_VERSION,
                                       "c-naive", 1, &Create};

__attribute__((visibility("default"))) const attnkit_plugin* attnkit_plugin_entry(void) {
  return &kPlugin;
}
