// Random valid attention problems for differential fuzzing: shapes, GQA
// ratios, masks, alignments, padding (zero-length sequences included), dense
// masks that block whole rows, bias, softcap, dtypes, layouts, NaN / Inf in
// the blocked positions (poison_blocked) and anywhere (nonfinite_inputs),
// and the serving features: int8 K/V, paged K/V (shared pages included) and
// ragged batches (sequences without queries or keys); and the compute mode
// (FAST for about a third of the problems with 16-bit or int8 K/V).
#ifndef ATTNKIT_TOOLS_DIFF_FUZZ_RANDOM_CONFIG_H_
#define ATTNKIT_TOOLS_DIFF_FUZZ_RANDOM_CONFIG_H_

#include <random>

#include "core/config.pb.h"
#include "core/problem_config.h"

namespace attnkit {

// A config that ProblemFromConfig accepts, small enough that the fp64
// reference runs it in milliseconds (B * H * Tq * Tk * d <= max_work).
AttentionConfig RandomConfig(std::mt19937_64& rng, double max_work = 4e6);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_DIFF_FUZZ_RANDOM_CONFIG_H_
