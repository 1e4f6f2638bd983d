// Planning one flash forward launch on the host (no CUDA): the kernel
// (flash or decode), its compiled configuration for the compute mode, the
// key splits and their scratch, and the kernel's name for RunInfo. Tested
// on the CPU by flash_plan_test.
#ifndef ATTNKIT_BACKENDS_CUDA_FLASH_PLAN_H_
#define ATTNKIT_BACKENDS_CUDA_FLASH_PLAN_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cuda/flash_params.h"
#include "backends/cuda/kernel_traits.h"

namespace attnkit {
namespace cuda {

// One kernel launch, planned on the host: its parameters (split count
// included), the kernel and the split-K scratch it needs.
struct LaunchPlan {
  FlashParams params;
  int bucket = 0;
  bool decode = false;
  KernelConfig config;
  size_t partial_o_bytes = 0;  // split-K partial O, then partial LSE
  size_t workspace_bytes = 0;  // 0 without split-K
};

// The plan of `params` on a GPU with `num_sms` SMs: the decode kernel when
// UseDecodeKernel (P in f32 there: round_p cleared), else the flash kernel
// instance FlashConfig(bucket, compute, round_p) (EXACT: f32 P on the CUDA
// cores; FAST: 16-bit P on tensor cores); the split count and the split-K
// workspace. Unimplemented for a head dim beyond the compiled buckets
// (`backend` names the backend in the message).
absl::StatusOr<LaunchPlan> PlanLaunch(const FlashParams& params, int num_sms,
                                      const std::string& backend);

// "flash-wmma-bf16 d128 m64n64w4 splits=1 p=f32", "flash-decode-f32 d128
// rows8 w4 splits=4 p=f32 kv=i8 paged=16": the kernel, its configuration,
// what the compute mode rounded (ComputeTag: "p=f32" under EXACT, "p=bf16"
// when FAST rounds P, "q->bf16" when it rounds Q stored in another type)
// and the K/V storage it read.
std::string KernelName(const LaunchPlan& plan);

// A ragged batch's launches in one line: "ragged seqs=3: 2x <kernel>; 1x
// <kernel>", kernels in order of first use.
std::string RaggedKernelName(const std::vector<LaunchPlan>& plans);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_FLASH_PLAN_H_
