// fp32 and bf16 linear layers on CPU, y = x W^T (+ bias), over a weight packed once into column
// panels.
//
// Why: decoding streams every weight once per step for a handful of rows (1 per sequence, or
// 1 + k with speculative drafts). oneDNN and MKL pick different algorithms per row count, and
// for 2..16 rows they ran up to 2x slower than for 1 (a verify step of 5 rows cost 1.4x a
// plain step, almost all of it in the GEMMs). Here each panel of 16 output columns is stored
// as [K][16] floats, read sequentially once per tile of up to kMaxRows rows, and every output
// element is one fp32 sum over k in increasing order: the same bits whatever the batch holds
// (a row's result does not depend on how many rows share the call).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu_vec.h"

namespace {

constexpr int64_t kLanes = 16;
typedef float vec __attribute__((vector_size(kLanes * sizeof(float))));

#ifdef __AVX512F__
// 32 vector registers: 8 rows x 2 or 3 panels of accumulators, or 16 rows x 1 panel.
constexpr int kMaxRows = 8;
constexpr int kPanels = 2;  // bf16 tiles (a bf16 SiLU MLP's gate / up pairs among them)
// fp32 tiles are 8 x 3: one x broadcast per 3 multiply-adds of a k step instead of per 2 (the
// tile's loads kept it under the FMA unit's rate). On the 2-core EPYC, 30 layers' qkv, o and
// down plus the LM head in huge pages took 0.96x the time of 8 x 2 tiles at 64 rows and
// 0.99x at 384 (2 threads; 0.94x on one thread), a race-shaped offline run 0.99x. bf16 tiles
// gained nothing from a third panel (1.00-1.01x; offline 1.03x), so they keep 2. A SiLU
// gate_up in groups of 3 gate then 3 up panels (silu_mul_tiles): 30 layers' at 64 rows
// 0.955-0.965x the time of 8 x 2 gate / up pairs, 0.97x at 384.
constexpr int kFp32Panels = 3;
constexpr int kTallRows = 16;
#else
// 16 (AVX2: each 16-lane vector is two registers): 6 rows x 1 panel.
constexpr int kMaxRows = 6;
constexpr int kPanels = 1;
constexpr int kFp32Panels = 1;
constexpr int kTallRows = 6;
#endif

// How many k steps (64-byte lines of a panel) ahead to prefetch into L1, and into L2. The
// L1 distance alone (~2 KiB a panel) left a 9-16-row tile, whose FMAs and weight stream take
// about as long as each other, waiting on memory; asking L2 for the line four times earlier
// keeps more of the stream in flight. All 121 linears + LM head of the default model, huge
// pages, alternating in one process (three runs): fp32 0.85-0.89x the time at 16 rows,
// 0.96-0.98x at 8 and 32, 0.98-1.01x at 1 and 64; bf16 0.92-0.94x at 1, 0.95-0.97x at 16,
// 0.98-0.99x at 32 and 64.
constexpr int64_t kPrefetch = 32;
constexpr int64_t kPrefetchL2 = 128;

// Both prefetches of panel line k + distance (never faults: a prefetch past the weight's end
// is dropped).
template <typename T>
inline void prefetch_panel_line(const T* line_k) {
  __builtin_prefetch(line_k + kPrefetch * kLanes);
  __builtin_prefetch(line_k + kPrefetchL2 * kLanes, 0, 2);
}

inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Rows [0, R) of x against panels [0, P) starting at wp (each [K][16]); out columns [0, cols).
template <int R, int P>
void tile(const float* x, int64_t ldx, const float* wp, int64_t K, const float* bias,
          float* y, int64_t ldy, int64_t cols, const float* ahead, int64_t ahead_lines) {
  vec acc[R][P];  // zeroed one register at a time (see tile_bf16)
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = vec{};
  for (int64_t k = 0; k < K; ++k) {
    // The weight is read once, front to back: ask for it well before it is needed so the
    // memory latency overlaps the FMAs (the hardware prefetcher alone left them serial).
    for (int p = 0; p < P; ++p) prefetch_panel_line(wp + (p * K + k) * kLanes);
    for (int64_t j = k; j < ahead_lines; j += K) __builtin_prefetch(ahead + j * kLanes);
    vec w[P];
    for (int p = 0; p < P; ++p) w[p] = load(wp + (p * K + k) * kLanes);
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * ldx + k];
      for (int p = 0; p < P; ++p) acc[r][p] += xv * w[p];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) {
      const int64_t n = std::min<int64_t>(kLanes, cols - p * kLanes);
      if (n <= 0) break;
      vec out = acc[r][p];
      if (bias != nullptr) out += hybridllm_cpu::load16(bias + p * kLanes, n);
      if (n == kLanes) {
        hybridllm_cpu::store16(y + r * ldy + p * kLanes, out);  // whole: one vector store
      } else {
        hybridllm_cpu::store16(y + r * ldy + p * kLanes, out, n);
      }
    }
  }
}

// fn(std::integral_constant<int, R>{}) for R = rows: a tile height the compiler knows, so
// the accumulators stay in registers.
template <typename Fn>
void with_tile_height(int rows, Fn&& fn) {
  switch (rows) {
#define HYBRIDLLM_TILE(R) \
  case R:                 \
    return fn(std::integral_constant<int, R>{});
    HYBRIDLLM_TILE(1)
    HYBRIDLLM_TILE(2)
    HYBRIDLLM_TILE(3)
    HYBRIDLLM_TILE(4)
    HYBRIDLLM_TILE(5)
    HYBRIDLLM_TILE(6)
#ifdef __AVX512F__
    HYBRIDLLM_TILE(7)
    HYBRIDLLM_TILE(8)
    HYBRIDLLM_TILE(9)
    HYBRIDLLM_TILE(10)
    HYBRIDLLM_TILE(11)
    HYBRIDLLM_TILE(12)
    HYBRIDLLM_TILE(13)
    HYBRIDLLM_TILE(14)
    HYBRIDLLM_TILE(15)
    HYBRIDLLM_TILE(16)
#endif
#undef HYBRIDLLM_TILE
    default:
      TORCH_CHECK(false, "linear_cpu: bad tile height ", rows);
  }
}

// fn(std::integral_constant<int, P>{}) for P = n, 1 <= n <= G.
template <int G, typename Fn>
void with_panel_count(int64_t n, Fn&& fn) {
  if constexpr (G > 1) {
    if (n < G) return with_panel_count<G - 1>(n, fn);
  }
  fn(std::integral_constant<int, G>{});
}

// fn(R, P, m0, p0, cols, ahead, ahead_lines) for every tile of an [M, N] output over `panels`
// panels of `steps` 64-byte lines each: rows [m0, m0 + R) against panels [p0, p0 + P), whose
// first `cols` columns are real. R and P come as std::integral_constant. Threads split the
// groups of G panels; a group's panels stay in cache while every row tile reads them (the
// last group may have fewer: P = its panel count).
// Rows kMaxRows < M <= kTallRows (a decode batch of 9-16): one tile of all M rows per panel,
// so each weight line is used M times as it streams in and the multiply-adds overlap the
// stream. Tiles of 8 rows against 2 panels made the first row tile wait on memory and the
// second compute from cache, one after the other: 16 rows took 1.1x as long (bf16, all 121
// linears of the default model). More rows: 8 x G tiles, which read x 1 / G as often.
// With two or more row tiles, a group's tiles also fetch the thread's next group: lines
// [ahead, ahead + ahead_lines) of the packed weight, split over the row tiles. The weight then
// streams from memory while the later row tiles compute from cache, instead of the first row
// tile of each group waiting on it. All 121 linears of the default model on the 2-core EPYC
// of docs/benchmarks.md, alternating in one process: bf16 0.82x the time at 32 rows, 0.92x
// at 64, 0.94x at 512; fp32 0.93x at 64, 0.98x at 512. One row tile gains nothing from it.
template <int G = kPanels, typename Fn>
void for_each_tile(int64_t M, int64_t N, int64_t panels, int64_t steps, Fn&& fn) {
  const int64_t groups = (panels + G - 1) / G;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    const int64_t end = std::min(g1 * G, panels);  // this thread's last panel + 1
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t first = g * G, last = std::min(first + G, panels);
      if (M <= kMaxRows || M > kTallRows) {
        const int64_t cols = std::min<int64_t>(N - first * kLanes, G * kLanes);
        const int64_t row_tiles = (M + kMaxRows - 1) / kMaxRows;
        // One row tile (up to 8 rows): no cached reuse for the fetch to hide behind.
        const int64_t next_lines = row_tiles > 1 ? (std::min(last + G, end) - last) * steps : 0;
        const int64_t share = (next_lines + row_tiles - 1) / row_tiles;
        for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
          const int64_t from = std::min(next_lines, m0 / kMaxRows * share);
          const int64_t ahead = last * steps + from;
          const int64_t ahead_lines = std::min(share, next_lines - from);
          with_tile_height(static_cast<int>(std::min<int64_t>(kMaxRows, M - m0)), [&](auto r) {
            with_panel_count<G>(last - first, [&](auto p) {
              fn(r, p, m0, first, cols, ahead, ahead_lines);
            });
          });
        }
        continue;
      }
      for (int64_t p0 = first; p0 < last; ++p0) {
        const int64_t cols = std::min<int64_t>(N - p0 * kLanes, kLanes);
        with_tile_height(static_cast<int>(M), [&](auto r) {
          fn(r, std::integral_constant<int, 1>{}, 0, p0, cols, int64_t{0}, int64_t{0});
        });
      }
    }
  });
}

// ---- bf16: the weight in panels of [K/2][16][2] (pairs of k per output column) ----
// One 64-byte line holds a k pair for 16 columns: with AVX512_BF16 one vdpbf16ps multiplies
// it by a row's broadcast x pair and adds both products to the fp32 accumulators, twice the
// multiply-adds of an fp32 FMA per instruction over half the weight bytes. Elsewhere the pair
// is widened to fp32 (exact) and added by two FMAs. Accumulation is fp32 either way; each
// output is rounded to bf16 once, so a row's result again does not depend on the batch.

using hybridllm_cpu::as_vec;
using hybridllm_cpu::store16;  // fp32 -> bf16 rounds to nearest even, as c10::BFloat16 does
typedef hybridllm_cpu::u32x16 u32v;

inline u32v load_u32(const uint32_t* p) {
  u32v v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Rows [0, R) of x (bf16, K2 / 2 pairs per row, ldx in pairs) against panels [0, P) at wp.
template <int R, int P>
void tile_bf16(const uint32_t* x, int64_t ldx, const uint32_t* wp, int64_t pairs,
               const float* bias, uint16_t* y, int64_t ldy, int64_t cols,
               const uint32_t* ahead, int64_t ahead_lines) {
  // Zeroed one register at a time: `= {}` on the array compiled to a memset call per tile.
  vec acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = vec{};
  for (int64_t k = 0; k < pairs; ++k) {
    for (int p = 0; p < P; ++p) prefetch_panel_line(wp + (p * pairs + k) * kLanes);
    for (int64_t j = k; j < ahead_lines; j += pairs) __builtin_prefetch(ahead + j * kLanes);
#ifdef __AVX512BF16__
    __m512bh w[P];
    for (int p = 0; p < P; ++p) {
      w[p] = (__m512bh)_mm512_loadu_si512(wp + (p * pairs + k) * kLanes);
    }
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[r * ldx + k]));
      for (int p = 0; p < P; ++p) acc[r][p] = (vec)_mm512_dpbf16_ps((__m512)acc[r][p], xv, w[p]);
    }
#else
    vec lo[P], hi[P];
    for (int p = 0; p < P; ++p) {
      const u32v w = load_u32(wp + (p * pairs + k) * kLanes);
      lo[p] = as_vec(w << 16);
      hi[p] = as_vec(w & 0xffff0000u);
    }
    for (int r = 0; r < R; ++r) {
      const uint32_t xp = x[r * ldx + k];
      float xl, xh;
      const uint32_t xlb = xp << 16, xhb = xp & 0xffff0000u;
      std::memcpy(&xl, &xlb, sizeof xl);
      std::memcpy(&xh, &xhb, sizeof xh);
      for (int p = 0; p < P; ++p) acc[r][p] += xl * lo[p] + xh * hi[p];
    }
#endif
  }
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) {
      const int64_t n = std::min<int64_t>(kLanes, cols - p * kLanes);
      if (n <= 0) break;
      vec out = acc[r][p];
      if (bias != nullptr) out += hybridllm_cpu::load16(bias + p * kLanes, n);
      if (n == kLanes) {
        store16(y + r * ldy + p * kLanes, out);  // whole: one vector store
      } else {
        store16(y + r * ldy + p * kLanes, out, n);
      }
    }
  }
}

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
// ---- bf16 on AMX: the same pair panels, up to 16 rows x 4 panels per tile step ----
// 16 consecutive k pairs of a pair panel ([16][16][2] bf16, 1 KiB) are laid out exactly as an
// AMX B tile (16 rows of 64 bytes), so the panels feed TDPBF16PS as packed: one instruction
// multiplies up to 16 rows of x by 32 k of 16 columns, summed in fp32. On the 2-core Xeon of
// docs/benchmarks.md one instruction stream ran ~2.2 TFLOPS a core, the vdpbf16ps tiles
// ~0.11, and the model's linears took 0.2x the vdpbf16ps tiles' time at 64 rows. Tiles: tmm0
// x, tmm1 and tmm2 the weight (alternating), tmm4..tmm7 the sums of 4 panels. Each output is
// still one fp32 sum per row, whatever the batch holds.
constexpr int64_t kAmxPairs = 16;  // k pairs in one B tile
constexpr int kAmxPanels = 4;      // C tiles
constexpr int kAmxRows = 16;

struct TileConfig {  // LDTILECFG's 64-byte layout, palette 1
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Linux hands out the AMX register state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
// XTILEDATA), once per process: false where it refuses, and the callers keep vdpbf16ps.
bool amx_permitted() {
  static const bool ok = [] {
    constexpr int kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
}

bool g_amx_enabled = true;  // use_amx(): the tests compare both paths in one process

bool amx_on() { return g_amx_enabled && amx_permitted(); }

// Tile shapes for `rows` rows of x (the config is per thread, and oneDNN may have loaded its
// own since: loaded again at the start of every parallel chunk).
void amx_configure(int rows) {
  TileConfig c;
  c.rows[0] = rows;
  c.colsb[0] = 64;
  for (int t = 1; t <= 2; ++t) {
    c.rows[t] = kAmxPairs;
    c.colsb[t] = 64;
  }
  for (int t = 4; t < 4 + kAmxPanels; ++t) {
    c.rows[t] = rows;
    c.colsb[t] = kLanes * sizeof(float);
  }
  _tile_loadconfig(&c);
}

// The configured rows of x (ldx bytes apart) against G panels at wp: fp32 sums to out
// [rows][kAmxPanels * 16].
template <int G>
void amx_tile(const uint16_t* x, int64_t ldx, const uint32_t* wp, int64_t pairs, float* out) {
  constexpr int64_t ldo = kAmxPanels * kLanes * sizeof(float);
  const int64_t panel = pairs * kLanes;  // uint32 elements a panel
  _tile_zero(4);
  if constexpr (G > 1) _tile_zero(5);
  if constexpr (G > 2) _tile_zero(6);
  if constexpr (G > 3) _tile_zero(7);
  for (int64_t k = 0; k < pairs; k += kAmxPairs) {
    const uint32_t* b = wp + k * kLanes;
    _tile_loadd(0, x + 2 * k, ldx);
    _tile_loadd(1, b, 64);
    _tile_dpbf16ps(4, 0, 1);
    if constexpr (G > 1) {
      _tile_loadd(2, b + panel, 64);
      _tile_dpbf16ps(5, 0, 2);
    }
    if constexpr (G > 2) {
      _tile_loadd(1, b + 2 * panel, 64);
      _tile_dpbf16ps(6, 0, 1);
    }
    if constexpr (G > 3) {
      _tile_loadd(2, b + 3 * panel, 64);
      _tile_dpbf16ps(7, 0, 2);
    }
  }
  _tile_stored(4, out, ldo);
  if constexpr (G > 1) _tile_stored(5, out + kLanes, ldo);
  if constexpr (G > 2) _tile_stored(6, out + 2 * kLanes, ldo);
  if constexpr (G > 3) _tile_stored(7, out + 3 * kLanes, ldo);
}

// Panels a block takes, 4 down to 2: the fewest panels on the busiest thread, then the
// widest block. 4-panel blocks split the model's 36-panel (576-column) projections 5 / 4
// between two threads, 3-panel ones 6 / 6: with 4, a fifth of the call was one thread
// waiting for the other.
int64_t amx_block_panels(int64_t panels, int64_t threads) {
  int64_t best = kAmxPanels, best_load = INT64_MAX;
  for (int64_t g = kAmxPanels; g >= 2; --g) {
    const int64_t blocks = (panels + g - 1) / g;
    const int64_t load = (blocks + threads - 1) / threads * g;
    if (load < best_load) {
      best = g;
      best_load = load;
    }
  }
  return best;
}

// x [M, 2 * pairs] bf16 against `panels` pair panels at wp: emit(m0, rows, p0, g, sums) for
// every block of up to 16 rows by g <= 4 panels, sums [rows][64] fp32. Threads split the
// panel blocks, as for_each_tile does.
template <typename Emit>
void for_each_amx_block(int64_t M, int64_t panels, int64_t pairs, const uint16_t* x,
                        const uint32_t* wp, Emit&& emit, int64_t step = 0) {
  // step: panels a block takes (a multiple of 2 keeps gate / up pairs together); 0: balanced.
  const int64_t g_panels = step ? step : amx_block_panels(panels, at::get_num_threads());
  const int64_t groups = (panels + g_panels - 1) / g_panels;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    alignas(64) float sums[kAmxRows * kAmxPanels * kLanes];
    int configured = 0;
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t first = g * g_panels;
      const int n = static_cast<int>(std::min<int64_t>(g_panels, panels - first));
      const uint32_t* w = wp + first * pairs * kLanes;
      for (int64_t m0 = 0; m0 < M; m0 += kAmxRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kAmxRows, M - m0));
        if (rows != configured) {
          amx_configure(rows);
          configured = rows;
        }
        const uint16_t* xr = x + m0 * 2 * pairs;
        const int64_t ldx = 2 * pairs * sizeof(uint16_t);
        switch (n) {
          case 4: amx_tile<4>(xr, ldx, w, pairs, sums); break;
          case 3: amx_tile<3>(xr, ldx, w, pairs, sums); break;
          case 2: amx_tile<2>(xr, ldx, w, pairs, sums); break;
          default: amx_tile<1>(xr, ldx, w, pairs, sums); break;
        }
        emit(m0, rows, first, n, static_cast<const float*>(sums));
      }
    }
    if (configured) _tile_release();
  });
}

// Whether a bf16 call with K = 2 * pairs takes the AMX path: whole B tiles only (K a multiple
// of 32, as in every model served here); others keep the vdpbf16ps tiles.
bool use_amx_for(int64_t pairs) {
  return pairs % kAmxPairs == 0 && amx_on();
}
#endif

#ifdef __AVX512F__
// ---- A SiLU MLP's gate_up with SiLU-and-mul as the epilogue ----
// The gate_up weight packed in groups (pack_silu_pairs in linear_cpu.py): each group holds G
// gate panels, columns [16Gt, 16Gt + 16G), then the same G up panels (the last group may have
// fewer). G is the dtype's tile width (silu_group): 3 in fp32, where an 8-row tile of each
// half is a whole 8 x 3 tile; 1 in bf16, where a group is one 8 x 2 tile over a gate panel
// and its up panel. Each tile's outputs go to a per-thread scratch (in L1, stored as
// linear() stores them: rounded to T), and out[:, 16j:16j + 16] = round(silu(gate)) * up is
// written from there, as silu_and_mul in layer_ops_cpu.cpp computes it. The [M, 2I] gate_up
// never goes to memory and no second pass reads it back. That pass took ~4x its in-cache time
// in the model: its input had just been written, half of it by the other core. A 9-16-row
// tile covers one panel: a group's panels wait in the scratch until its last one is done, all
// on the same thread.
// tile_fn(r, p, m0, p0, cols, ahead, ahead_lines, dst, ldd) computes one tile into dst.
constexpr int kSiluGroupFp32 = kFp32Panels;
constexpr int kSiluGroupBf16 = 1;  // the AMX path's 2- and 4-panel blocks assume pairs too
template <int G, typename T, typename TileFn>
void silu_mul_tiles(int64_t M, int64_t I, int64_t panels, int64_t steps, T* out,
                    TileFn&& tile_fn) {
  constexpr int64_t ld = 2 * G * kLanes;
  for_each_tile<2 * G>(M, panels * kLanes, panels, steps,
                       [&](auto r, auto p, int64_t m0, int64_t p0, int64_t cols, int64_t ahead,
                           int64_t ahead_lines) {
    constexpr int R = decltype(r)::value, P = decltype(p)::value;
    alignas(64) thread_local T scratch[kTallRows * ld];
    const int64_t first = p0 / (2 * G) * (2 * G);  // the group's first panel
    const int64_t g = std::min<int64_t>(G, (panels - first) / 2);  // its gate panels
    if constexpr (P == 1) {  // a 9-16-row tile of one panel: gate c at block c, up c at g + c
      tile_fn(r, p, m0, p0, cols, ahead, ahead_lines, scratch + (p0 - first) * kLanes, ld);
      if (p0 - first < 2 * g - 1) return;  // the group's last panel comes later
    } else if constexpr (P % 2 == 1) {
      TORCH_CHECK(false, "linear_silu_mul: a group of ", P, " panels is not gate / up halves");
    } else if constexpr (P <= kFp32Panels) {  // one pair: both halves in one 8 x 2 tile
      tile_fn(r, p, m0, p0, cols, ahead, ahead_lines, scratch, ld);
    } else {  // a tile of each half, each fetching half of the next group's lines
      constexpr int H = P / 2;
      const int64_t half = ahead_lines / 2;
      tile_fn(r, std::integral_constant<int, H>{}, m0, p0, H * kLanes, ahead, half, scratch,
              ld);
      tile_fn(r, std::integral_constant<int, H>{}, m0, p0 + H, H * kLanes, ahead + half,
              ahead_lines - half, scratch + H * kLanes, ld);
    }
    for (int64_t c = 0; c < g; ++c) {
      const int64_t j = first / 2 + c, n = std::min<int64_t>(kLanes, I - j * kLanes);
      for (int i = 0; i < R; ++i) {
        const vec gate = hybridllm_cpu::load16(scratch + i * ld + c * kLanes);
        const vec up = hybridllm_cpu::load16(scratch + i * ld + (g + c) * kLanes);
        const vec silu =
            hybridllm_cpu::round_to<T>(gate / (1.0f + hybridllm_cpu::exp16(-gate)));
        T* dst = out + (m0 + i) * I + j * kLanes;
        if (n == kLanes) {
          hybridllm_cpu::store16(dst, silu * up);
        } else {
          hybridllm_cpu::store16(dst, silu * up, n);
        }
      }
    }
  });
}
#endif

}  // namespace

// weight [N, K] -> [ceil(N / 16), K, 16], zero columns past N.
torch::Tensor pack(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat32,
              "pack: a 2-D fp32 weight");
  const int64_t N = weight.size(0), K = weight.size(1);
  const int64_t panels = (N + kLanes - 1) / kLanes;
  auto padded = torch::zeros({panels * kLanes, K}, weight.options());
  padded.narrow(0, 0, N).copy_(weight);
  return padded.view({panels, kLanes, K}).transpose(1, 2).contiguous();
}

// x [M, K] contiguous; packed from pack(); out [M, N].
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t N,
                     const c10::optional<torch::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "linear: x must be a contiguous 2-D fp32 tensor");
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == kLanes && packed.size(1) == x.size(1),
              "linear: packed weight does not match x");
  const int64_t M = x.size(0), K = x.size(1), panels = packed.size(0);
  TORCH_CHECK(N <= panels * kLanes && N > (panels - 1) * kLanes, "linear: bad N");
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  const float* bp = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->is_contiguous() && bias->numel() == N, "linear: bad bias");
    bp = bias->data_ptr<float>();
  }
  float* yp = y.data_ptr<float>();
  for_each_tile<kFp32Panels>(M, N, panels, K, [&](auto r, auto p, int64_t m0, int64_t p0,
                                                 int64_t cols, int64_t ahead,
                                                 int64_t ahead_lines) {
    const int64_t col0 = p0 * kLanes;
    tile<decltype(r)::value, decltype(p)::value>(xp + m0 * K, K, wp + p0 * K * kLanes, K,
                                                 bp == nullptr ? nullptr : bp + col0,
                                                 yp + m0 * N + col0, N, cols,
                                                 wp + ahead * kLanes, ahead_lines);
  });
  return y;
}

// bf16 weight [N, K] -> [ceil(N / 16), ceil(K / 2), 16, 2], zero columns past N and a zero
// k past an odd K.
torch::Tensor pack_bf16(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kBFloat16,
              "pack_bf16: a 2-D bf16 weight");
  const int64_t N = weight.size(0), K = weight.size(1);
  const int64_t panels = (N + kLanes - 1) / kLanes, pairs = (K + 1) / 2;
  auto padded = torch::zeros({panels * kLanes, pairs * 2}, weight.options());
  padded.narrow(0, 0, N).narrow(1, 0, K).copy_(weight);
  return padded.view({panels, kLanes, pairs, 2}).permute({0, 2, 1, 3}).contiguous();
}

// x [M, K] contiguous bf16; packed from pack_bf16(); bias fp32 or bf16; out [M, N] bf16.
torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& packed, int64_t N,
                          const c10::optional<torch::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kBFloat16,
              "linear_bf16: x must be a contiguous 2-D bf16 tensor");
  const int64_t M = x.size(0), K = x.size(1), pairs = (K + 1) / 2;
  TORCH_CHECK(packed.dim() == 4 && packed.size(2) == kLanes && packed.size(3) == 2 &&
                  packed.size(1) == pairs && packed.scalar_type() == torch::kBFloat16,
              "linear_bf16: packed weight does not match x");
  const int64_t panels = packed.size(0);
  TORCH_CHECK(N <= panels * kLanes && N > (panels - 1) * kLanes, "linear_bf16: bad N");
  // Rows as k pairs: an odd K gets a zero column so every pair is whole.
  const torch::Tensor xe = K % 2 == 0 ? x : torch::constant_pad_nd(x, {0, 1});
  auto y = torch::empty({M, N}, x.options());
  const auto* xp = reinterpret_cast<const uint32_t*>(xe.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint32_t*>(packed.data_ptr<at::BFloat16>());
  torch::Tensor b32;
  const float* bp = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->numel() == N, "linear_bf16: bad bias");
    b32 = bias->to(torch::kFloat32).contiguous();
    bp = b32.data_ptr<float>();
  }
  auto* yp = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  if (use_amx_for(pairs)) {
    for_each_amx_block(M, panels, pairs, reinterpret_cast<const uint16_t*>(xp), wp,
                       [&](int64_t m0, int rows, int64_t p0, int n, const float* sums) {
      for (int r = 0; r < rows; ++r) {
        for (int p = 0; p < n; ++p) {
          const int64_t col0 = (p0 + p) * kLanes, cols = std::min<int64_t>(kLanes, N - col0);
          if (cols <= 0) break;
          vec out = hybridllm_cpu::load16(sums + (r * kAmxPanels + p) * kLanes);
          if (bp != nullptr) out += hybridllm_cpu::load16(bp + col0, cols);
          store16(yp + (m0 + r) * N + col0, out, cols);
        }
      }
    });
    return y;
  }
#endif
  for_each_tile(M, N, panels, pairs, [&](auto r, auto p, int64_t m0, int64_t p0, int64_t cols,
                                         int64_t ahead, int64_t ahead_lines) {
    const int64_t col0 = p0 * kLanes;
    tile_bf16<decltype(r)::value, decltype(p)::value>(
        xp + m0 * pairs, pairs, wp + p0 * pairs * kLanes, pairs,
        bp == nullptr ? nullptr : bp + col0, yp + m0 * N + col0, N, cols,
        wp + ahead * kLanes, ahead_lines);
  });
  return y;
}

#ifdef __AVX512F__
// x [M, K] contiguous, fp32 or bf16; packed: a gate_up weight of 2 * ceil(I / 16) panels in
// gate / up groups of silu_group(dtype) panels each (pack() or pack_bf16() of that row order),
// no bias -> silu(x Wg^T) * (x Wu^T) [M, I], in x's dtype, the same values as linear() then
// silu_and_mul.
torch::Tensor linear_silu_mul(const torch::Tensor& x, const torch::Tensor& packed, int64_t I) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == packed.scalar_type(),
              "linear_silu_mul: x must be contiguous 2-D, of the weight's dtype");
  const int64_t M = x.size(0), K = x.size(1), panels = packed.size(0);
  TORCH_CHECK(I > 0 && panels == 2 * ((I + kLanes - 1) / kLanes),
              "linear_silu_mul: the packed weight is not 2 * ceil(I / 16) paired panels");
  auto y = torch::empty({M, I}, x.options());
  if (x.scalar_type() == torch::kFloat32) {
    TORCH_CHECK(packed.dim() == 3 && packed.size(1) == K, "linear_silu_mul: weight does not match x");
    const float* xp = x.data_ptr<float>();
    const float* wp = packed.data_ptr<float>();
    silu_mul_tiles<kSiluGroupFp32>(M, I, panels, K, y.data_ptr<float>(),
                          [&](auto r, auto p, int64_t m0, int64_t p0, int64_t cols, int64_t ahead,
                              int64_t ahead_lines, float* dst, int64_t ld) {
      tile<decltype(r)::value, decltype(p)::value>(xp + m0 * K, K, wp + p0 * K * kLanes, K,
                                                   nullptr, dst, ld, cols, wp + ahead * kLanes,
                                                   ahead_lines);
    });
    return y;
  }
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16, "linear_silu_mul: fp32 or bf16");
  const int64_t pairs = (K + 1) / 2;
  TORCH_CHECK(packed.dim() == 4 && packed.size(1) == pairs, "linear_silu_mul: weight does not match x");
  const torch::Tensor xe = K % 2 == 0 ? x : torch::constant_pad_nd(x, {0, 1});
  const auto* xp = reinterpret_cast<const uint32_t*>(xe.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint32_t*>(packed.data_ptr<at::BFloat16>());
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  if (use_amx_for(pairs)) {
    // Blocks of 4 or 2 panels, so panels 2j and 2j + 1 (gate and up of columns [16j, 16j +
    // 16)) share one; 4 where that still splits the pairs evenly between the threads.
    auto* out = reinterpret_cast<uint16_t*>(y.data_ptr<c10::BFloat16>());
    const int64_t threads = at::get_num_threads();
    const int64_t pairs_per_thread = (panels / 2 + threads - 1) / threads;
    const int64_t step = pairs_per_thread % 2 == 0 ? 4 : 2;
    for_each_amx_block(M, panels, pairs, reinterpret_cast<const uint16_t*>(xp), wp,
                       [&](int64_t m0, int rows, int64_t p0, int n, const float* sums) {
      for (int r = 0; r < rows; ++r) {
        for (int p = 0; p < n; p += 2) {
          const int64_t j = (p0 + p) / 2, cols = std::min<int64_t>(kLanes, I - j * kLanes);
          const float* s = sums + (r * kAmxPanels + p) * kLanes;
          // Rounded to bf16 first, as linear() would store them (see silu_mul_tiles).
          const vec gate = hybridllm_cpu::round_to<c10::BFloat16>(hybridllm_cpu::load16(s));
          const vec up = hybridllm_cpu::round_to<c10::BFloat16>(hybridllm_cpu::load16(s + kLanes));
          const vec silu =
              hybridllm_cpu::round_to<c10::BFloat16>(gate / (1.0f + hybridllm_cpu::exp16(-gate)));
          store16(out + (m0 + r) * I + j * kLanes, silu * up, cols);
        }
      }
    }, step);
    return y;
  }
#endif
  silu_mul_tiles<kSiluGroupBf16>(
      M, I, panels, pairs, y.data_ptr<c10::BFloat16>(),
      [&](auto r, auto p, int64_t m0, int64_t p0, int64_t cols, int64_t ahead,
          int64_t ahead_lines, c10::BFloat16* dst, int64_t ld) {
        tile_bf16<decltype(r)::value, decltype(p)::value>(
            xp + m0 * pairs, pairs, wp + p0 * pairs * kLanes, pairs, nullptr,
            reinterpret_cast<uint16_t*>(dst), ld, cols, wp + ahead * kLanes, ahead_lines);
      });
  return y;
}

// Gate panels per group in linear_silu_mul's packing of a weight of this dtype.
int64_t silu_group(bool bf16) {
  return bf16 ? kSiluGroupBf16 : kSiluGroupFp32;
}
#endif

// Whether bf16 calls run on AMX tiles (built with AMX, the kernel permits it, use_amx(true)).
bool amx_active() {
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  return amx_on();
#else
  return false;
#endif
}

// Turns the AMX path on or off (the tests race both paths); returns the previous setting.
bool use_amx(bool on) {
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  const bool was = g_amx_enabled;
  g_amx_enabled = on;
  return was;
#else
  return false;
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("amx_active", &amx_active, "Whether bf16 linears run on AMX tiles");
  m.def("use_amx", &use_amx, "Turn the bf16 AMX path on or off; returns the previous setting");
  m.def("pack", &pack, "Pack an [N, K] fp32 weight into [ceil(N/16), K, 16] panels");
  m.def("linear", &linear, "y = x W^T (+ bias) over packed panels");
  m.def("pack_bf16", &pack_bf16, "Pack an [N, K] bf16 weight into [ceil(N/16), ceil(K/2), 16, 2]");
  m.def("linear_bf16", &linear_bf16, "y = x W^T (+ bias) over bf16 pair panels, fp32 sums");
#ifdef __AVX512F__
  m.def("linear_silu_mul", &linear_silu_mul,
        "silu(x Wg^T) * (x Wu^T) over a gate_up weight packed in gate / up panel groups");
  m.def("silu_group", &silu_group, "Gate panels per group of linear_silu_mul's packing");
#endif
}
