// Comparing a backend's output with the fp64 reference. Tolerances depend on
// the storage dtype and the reduction lengths, never on the backend.
#ifndef ATTNKIT_CORE_COMPARE_H_
#define ATTNKIT_CORE_COMPARE_H_

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "core/problem.h"
#include "core/reference.h"

namespace attnkit {

// |o - ref| <= atol + rtol * |ref| elementwise, and likewise for the LSE.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
  double lse_atol = 0;
  double lse_rtol = 0;
};

// With v_max = max |V|, e_out = the storage epsilon and e_acc = 2^-23:
//   atol = v_max * (2 e_out + 8 e_acc (sqrt(d) + sqrt(Tk)))
// 2 e_out covers rounding O (and, on tensor-core paths, P) to storage; the
// fp32 term grows with the two reduction lengths, d and Tk.
Tolerance ToleranceFor(const AttentionProblem& p, double v_max);

struct Comparison {
  int64_t checked = 0;
  int64_t mismatches = 0;   // elements outside the tolerance
  bool non_finite = false;  // NaN or Inf where the reference is finite
  double max_abs_err = 0;
  double max_rel_err = 0;  // |o - ref| / max(|ref|, v_max * e_out)
  double max_lse_err = 0;
  std::string first_failure;  // where and what, for the first bad element
  Tolerance tolerance;
  bool ok() const { return mismatches == 0 && !non_finite; }
};

// Compares host outputs args.o (and args.lse when p.return_lse) with `ref`.
// Inputs are read from args.v to find v_max.
Comparison CompareToReference(const AttentionProblem& p, const AttentionArgs& args,
                              const ReferenceResult& ref);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_COMPARE_H_
