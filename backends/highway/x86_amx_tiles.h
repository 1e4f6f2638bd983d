// The tile configuration of the AMX kernels (x86_amx_dot.cc): 8 tiles of
// 16 rows x 64 bytes, palette 1, loaded where a thread's tiles do not hold
// it (the first call, or after another library's) rather than at every
// call. Include only where x86-64 with GCC or Clang is known (the
// functions carry their own target attributes).
#ifndef ATTNKIT_BACKENDS_HIGHWAY_X86_AMX_TILES_H_
#define ATTNKIT_BACKENDS_HIGHWAY_X86_AMX_TILES_H_

#include <immintrin.h>

#include <cstdint>

#define ATTNKIT_TARGET_AMX_TILE __attribute__((target("avx512f,amx-tile")))

namespace attnkit {
namespace x86_dot {
namespace amx_tiles {

// ldtilecfg's 64-byte operand (palette 1).
struct TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// A constant in memory. ldtilecfg reads it, and sttilecfg writes the
// thread's state, through asm operands of the full 64 bytes: GCC 12's
// _tile_loadconfig and _tile_storeconfig tell the compiler they touch 8
// (a test program's stack-built configuration lost its colsb and rows
// stores, and its first tilezero faulted).
alignas(64) inline constexpr TileConfig kTileConfig = {
    /*palette_id=*/1,
    /*start_row=*/0,
    /*reserved=*/{},
    /*colsb=*/{64, 64, 64, 64, 64, 64, 64, 64},
    /*rows=*/{16, 16, 16, 16, 16, 16, 16, 16},
};

// Loads kTileConfig unless this thread's tiles hold it already. Another
// library in the process (oneDNN) may have loaded its own configuration
// on this thread, or released the tiles, so the state is read, not
// remembered: sttilecfg and a compare take about 3 ns where ldtilecfg
// takes about 55 (a Xeon with AMX, a loop of calls). A 64 x 64 bf16 tile
// makes two calls (prefill_kernels_bench, one thread, d 64: AmxQDotK 0.67
// -> 0.54 us; FAST bf16 prefill 16 and 18, 2 threads, three alternating
// rounds: 10.61-11.05 -> 10.30-10.91 ms and 14.41-15.33 -> 13.51-14.02).
// static: its thread_local stays internal to the translation unit, where
// an inline function's would be a symbol the plugins export.
ATTNKIT_TARGET_AMX_TILE static inline void EnsureTileConfig() {
  // Stored to memory of the thread's own, not to the stack: under ASan's
  // use-after-return detection (tools/ci_hardening.sh) a local written by
  // sttilecfg and read back faulted.
  alignas(64) static thread_local TileConfig now;
  asm volatile("sttilecfg %0" : "=m"(now));
  const __m512i have = _mm512_loadu_si512(&now);
  const __m512i want = _mm512_loadu_si512(&kTileConfig);
  if (_mm512_cmpneq_epi64_mask(have, want) != 0) {
    asm volatile("ldtilecfg %0" ::"m"(kTileConfig));
  }
}

// GCC 12's _tile_loadd tells the compiler it reads no memory: after a
// kernel's own stores to a buffer a tile then loads, this barrier keeps
// them (and keeps them before the load). _tile_stored clobbers memory.
inline void TileInputsWritten() { asm volatile("" ::: "memory"); }

}  // namespace amx_tiles
}  // namespace x86_dot
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_X86_AMX_TILES_H_
