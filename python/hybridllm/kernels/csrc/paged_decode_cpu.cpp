// Paged decode attention on CPU: one query token per sequence, keys and values read in place
// from the paged cache through the block table. The torch path must first gather every
// sequence's blocks into a dense buffer (one extra write and read of all KV bytes per layer);
// decode attention is memory-bound, so reading the cache once is what makes it fast.
// A bf16 cache is read as bf16 (half the bytes) and widened to fp32 in registers: every
// product and sum is fp32 whatever the cache holds.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu_vec.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

namespace {

using namespace hybridllm_cpu;

// Softmax numerator in place: s[t] = exp(s[t] - max(s)). Returns 1 / sum, the normalizer.
inline float exp_shifted(float* s, int64_t len) {
  // max_element is a scalar loop (it returns a position): a lane-wise max instead.
  const vec16 ninf = vec16{} - std::numeric_limits<float>::infinity();
  vec16 lanes = ninf;
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    const vec16 v = load16(s + i);
    lanes = v > lanes ? v : lanes;
  }
  for (; i < len; ++i) lanes[0] = s[i] > lanes[0] ? s[i] : lanes[0];
  float mx = lanes[0];
  for (int j = 1; j < kLanes; ++j) mx = lanes[j] > mx ? lanes[j] : mx;
  // 16 lanes at a time.
  vec16 lane_sums = {};
  for (i = 0; i + kLanes <= len; i += kLanes) {
    const vec16 e = exp16(load16(s + i) - mx);
    store16(s + i, e);
    lane_sums += e;
  }
  float sum = hsum(lane_sums);
  for (; i < len; ++i) {
    s[i] = exp_clamped(s[i] - mx);
    sum += s[i];
  }
  return 1.f / sum;
}

// scores[g] = scale * (q_g . k) for the G query heads sharing one kv head: each key row is
// loaded once for all G. Partial sums in kLanes lanes so the compiler vectorizes the loop.
template <int G, typename T>
inline void dot_group(const float* q, const T* k, int64_t dim, float scale, float* scores,
                      int64_t stride) {
  float acc[G][kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes) {
    for (int g = 0; g < G; ++g) {
      for (int64_t j = 0; j < kLanes; ++j) acc[g][j] += q[g * dim + d + j] * widen(k[d + j]);
    }
  }
  for (int g = 0; g < G; ++g) {
    float sum = 0.f;
    for (int64_t j = 0; j < kLanes; ++j) sum += acc[g][j];
    for (int64_t e = d; e < dim; ++e) sum += q[g * dim + e] * widen(k[e]);
    scores[g * stride] = sum * scale;
  }
}

template <typename T>
inline void dot_any(const float* q, const T* k, int64_t dim, int64_t group, float scale,
                    float* scores, int64_t stride) {
  for (int64_t g = 0; g < group; ++g) dot_group<1>(q + g * dim, k, dim, scale, scores + g * stride, 0);
}

// Locality 3 asks for the lines in L1; 2, in L2 only: lines wanted a block from now, which
// L1 could not keep until then.
template <int Locality = 3, typename T>
inline void prefetch_row(const T* row, int64_t elements) {
  constexpr int64_t kLine = 64 / sizeof(T);  // elements per 64-byte line
  for (int64_t f = 0; f < elements; f += kLine) __builtin_prefetch(row + f, 0, Locality);
}

// Key blocks are scattered over the cache, and the hardware prefetcher starts every block
// cold, so the decode kernels ask L2 for each block's keys and values one block early: the
// key pass of block b fetches block b + 1, a token row of keys and of values per key it
// computes, and the value pass fetches the first block of the sequence the thread decodes
// next (`NextSeq`). 30 layers, 64 sequences of 129-255 keys in huge pages, alternating in one
// process, outputs bitwise equal: fp32 0.74x the time (18.5 -> 25.0 GB/s), 16 sequences
// 0.72x; bf16 0.69x (14.4 -> 20.9 GB/s), 16 sequences 0.65x.
template <typename T>
struct NextSeq {
  const T* k = nullptr;  // its first block's rows in the key cache, or null: none follows
  const T* v = nullptr;  // the same rows in the value cache
  int64_t elements = 0;  // one block's elements
};

template <typename T>
inline void prefetch_next_seq(const NextSeq<T>& next) {
  if (next.k == nullptr) return;
  prefetch_row<2>(next.k, next.elements);
  prefetch_row<2>(next.v, next.elements);
}

// out[i, :, :] = softmax(scale * q . K_i) V_i for every head of one sequence, over its keys
// first .. len - 1 (first > 0 for a sliding-window layer). Each token's keys (all kv heads)
// are one contiguous row, read once for all heads, block after block: sequential within a
// block, which the hardware prefetcher follows. Scores are indexed from `first`.
template <int G, typename T>
void decode_one(const float* q, const T* kc, const T* vc, const int32_t* table,
                int64_t first, int64_t len, int64_t block_size, int64_t num_kv, int64_t group,
                int64_t dim, float scale, float* out, std::vector<float>& scores,
                const NextSeq<T>&) {
  const int64_t heads = num_kv * group, token_stride = num_kv * dim, cnt = len - first;
  scores.resize(heads * cnt);
  for (int64_t t = first; t < len;) {
    const int64_t blk = t / block_size, off = t % block_size;
    const int64_t n = std::min(block_size - off, len - t);
    const T* row = kc + (int64_t(table[blk]) * block_size + off) * token_stride;
    // Blocks are scattered: start fetching the next one while this one is computed.
    const T* next = t + n < len
        ? kc + int64_t(table[blk + 1]) * block_size * token_stride
        : nullptr;
    for (int64_t j = 0; j < n; ++j, row += token_stride) {
      if (next != nullptr) prefetch_row(next + j * token_stride, token_stride);
      for (int64_t h = 0; h < num_kv; ++h) {
        float* dst = scores.data() + h * group * cnt + (t - first) + j;
        if constexpr (G > 0) {
          dot_group<G>(q + h * G * dim, row + h * dim, dim, scale, dst, cnt);
        } else {
          dot_any(q + h * group * dim, row + h * dim, dim, group, scale, dst, cnt);
        }
      }
    }
    t += n;
  }
  for (int64_t r = 0; r < heads; ++r) {
    float* s = scores.data() + r * cnt;
    const float inv = exp_shifted(s, cnt);
    for (int64_t t = 0; t < cnt; ++t) s[t] *= inv;
  }
  std::fill(out, out + heads * dim, 0.f);
  for (int64_t t = first; t < len;) {
    const int64_t blk = t / block_size, off = t % block_size;
    const int64_t n = std::min(block_size - off, len - t);
    const T* row = vc + (int64_t(table[blk]) * block_size + off) * token_stride;
    const T* next = t + n < len
        ? vc + int64_t(table[blk + 1]) * block_size * token_stride
        : nullptr;
    for (int64_t j = 0; j < n; ++j, row += token_stride) {
      if (next != nullptr) prefetch_row(next + j * token_stride, token_stride);
      for (int64_t r = 0; r < heads; ++r) {
        const float p = scores[r * cnt + (t - first) + j];
        const T* v = row + (r / group) * dim;
        float* o = out + r * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] += p * widen(v[d]);
      }
    }
    t += n;
  }
}


// ---- Head dims that are a multiple of 16 (all common models): explicit vectors ----
// GCC/Clang vector types of 16 floats, lowered to the widest registers the target has. The
// generic loops above leave per-key horizontal sums and per-element stores to the compiler,
// which made this kernel compute-bound (about 2.5x slower than here with the data in cache).
// decode_one for head_dim = 16 * NV and G query heads per kv head, both known at compile time.
// Keys and values are visited token row by token row (all kv heads of a token are one
// contiguous row), so each block is read front to back: the hardware prefetcher streams it
// while the arithmetic runs. Visiting a block once per kv head instead (strided) measured
// 15% slower overall although it does less arithmetic. The softmax is normalized at the end.
template <int NV, int G, typename T>
void decode_vec(const float* q, const T* kc, const T* vc, const int32_t* table,
                int64_t first, int64_t len, int64_t block_size, int64_t num_kv, int64_t,
                int64_t, float scale, float* out, std::vector<float>& scores,
                const NextSeq<T>& next) {
  constexpr int64_t dim = NV * 16;
  const int64_t heads = num_kv * G, token_stride = num_kv * dim, cnt = len - first;
  scores.resize(heads * cnt + heads);
  float* inv = scores.data() + heads * cnt;
  // Up to 16 keys at a time (never across a block): each head's 16 partial-sum vectors are
  // parked in `part`, then summed by one hsum16 into a vector of 16 scores.
  thread_local std::vector<vec16> part;
  part.resize(heads * kLanes);
  for (int64_t t = first; t < len;) {
    const int64_t blk = t / block_size, off = t % block_size;
    const int64_t n = std::min({block_size - off, len - t, kLanes});
    const int64_t slot = int64_t(table[blk]) * block_size + off;
    const T* row = kc + slot * token_stride;
    const T* vrow = vc + slot * token_stride;
    const bool more = (blk + 1) * block_size < len;
    const int64_t ahead = more ? (int64_t(table[blk + 1]) * block_size + off) * token_stride : 0;
    for (int64_t j = 0; j < n; ++j, row += token_stride, vrow += token_stride) {
      if (more) {  // the next block's row j, into L2
        prefetch_row<2>(kc + ahead + j * token_stride, token_stride);
        prefetch_row<2>(vc + ahead + j * token_stride, token_stride);
      }
      // This key's values, read after all keys: fetched now, in L1 by then (as decode_dp
      // does).
      prefetch_row(vrow, token_stride);
      for (int64_t h = 0; h < num_kv; ++h) {
        const float* qh = q + h * G * dim;
        vec16 acc[G] = {};
        for (int c = 0; c < NV; ++c) {
          const vec16 k = load16(row + h * dim + c * 16);
          for (int g = 0; g < G; ++g) acc[g] += load16(qh + g * dim + c * 16) * k;
        }
        for (int g = 0; g < G; ++g) part[(h * G + g) * kLanes + j] = acc[g];
      }
    }
    for (int64_t r = 0; r < heads; ++r) {
      // Lanes past n hold stale sums: computed, never stored.
      store16(scores.data() + r * cnt + (t - first), hsum16(&part[r * kLanes]) * scale, n);
    }
    t += n;
  }
  for (int64_t r = 0; r < heads; ++r) inv[r] = exp_shifted(scores.data() + r * cnt, cnt);
  prefetch_next_seq(next);
  if constexpr (G * NV <= 24) {
    // The weighted sum of values one kv head at a time, its G x NV accumulators in registers
    // (the loop below keeps them in memory: a load and a store per multiply-add).
    for (int64_t h = 0; h < num_kv; ++h) {
      vec16 acc[G][NV] = {};
      const float* p = scores.data() + h * G * cnt - first;
      for (int64_t t = first; t < len;) {
        const int64_t blk = t / block_size, off = t % block_size;
        const int64_t n = std::min(block_size - off, len - t);
        const T* row = vc + (int64_t(table[blk]) * block_size + off) * token_stride + h * dim;
        for (int64_t j = 0; j < n; ++j, row += token_stride) {
          for (int c = 0; c < NV; ++c) {
            const vec16 v = load16(row + c * 16);
            for (int g = 0; g < G; ++g) acc[g][c] += p[g * cnt + t + j] * v;
          }
        }
        t += n;
      }
      for (int g = 0; g < G; ++g)
        for (int c = 0; c < NV; ++c) store16(out + (h * G + g) * dim + c * 16, acc[g][c] * inv[h * G + g]);
    }
    return;
  }
  std::fill(out, out + heads * dim, 0.f);
  for (int64_t t = first; t < len;) {
    const int64_t blk = t / block_size, off = t % block_size;
    const int64_t n = std::min(block_size - off, len - t);
    const T* row = vc + (int64_t(table[blk]) * block_size + off) * token_stride;
    for (int64_t j = 0; j < n; ++j, row += token_stride) {
      for (int64_t h = 0; h < num_kv; ++h) {
        const float* p = scores.data() + h * G * cnt + (t - first) + j;
        float* oh = out + h * G * dim;
        for (int c = 0; c < NV; ++c) {
          const vec16 v = load16(row + h * dim + c * 16);
          for (int g = 0; g < G; ++g) {
            float* o = oh + g * dim + c * 16;
            store16(o, load16(o) + p[g * cnt] * v);
          }
        }
      }
    }
    t += n;
  }
  for (int64_t r = 0; r < heads; ++r)
    for (int64_t d = 0; d < dim; ++d) out[r * dim + d] *= inv[r];
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
// ---- bf16 with AVX512_BF16 (vdpbf16ps): decode_vec's work in fewer instructions ----
// q . k straight from the bf16 query and keys: one instruction takes 32 bf16 pairs (products
// exact, summed in fp32), where decode_vec widens both to fp32 first (three instructions per
// 16 keys' values and one multiply-add per 16 products). The scores' sums come in another
// order than decode_vec's (fp32 roundings apart). A value row is widened by one unpack per 16
// (bf16 is the top half of an fp32), which leaves each 128-bit lane's dims split between two
// vectors: the accumulators hold dims in that order, put back once per head at the end.
// Same products and sums as decode_vec for the weighted values. dim = 32 * NP.
template <int NP, int G>
void decode_dp(const c10::BFloat16* q, const c10::BFloat16* kc, const c10::BFloat16* vc,
               const int32_t* table, int64_t first, int64_t len, int64_t block_size,
               int64_t num_kv, float scale, float* out, std::vector<float>& scores,
               const NextSeq<c10::BFloat16>& next) {
  constexpr int64_t dim = NP * 32;
  const int64_t heads = num_kv * G, token_stride = num_kv * dim, cnt = len - first;
  scores.resize(heads * cnt + heads);
  float* inv = scores.data() + heads * cnt;
  thread_local std::vector<vec16> part;
  part.resize(heads * kLanes);
  for (int64_t t = first; t < len;) {
    const int64_t blk = t / block_size, off = t % block_size;
    const int64_t n = std::min({block_size - off, len - t, kLanes});
    const int64_t slot = int64_t(table[blk]) * block_size + off;
    const c10::BFloat16* row = kc + slot * token_stride;
    const c10::BFloat16* vrow = vc + slot * token_stride;
    const bool more = (blk + 1) * block_size < len;
    const int64_t ahead = more ? (int64_t(table[blk + 1]) * block_size + off) * token_stride : 0;
    for (int64_t j = 0; j < n; ++j, row += token_stride, vrow += token_stride) {
      if (more) {  // the next block's row j, into L2
        prefetch_row<2>(kc + ahead + j * token_stride, token_stride);
        prefetch_row<2>(vc + ahead + j * token_stride, token_stride);
      }
      // This key's values, read after all keys: fetched now, in L1 by then.
      prefetch_row(vrow, token_stride);
      for (int64_t h = 0; h < num_kv; ++h) {
        const c10::BFloat16* qh = q + h * G * dim;
        __m512 acc[G];
        for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
        for (int c = 0; c < NP; ++c) {
          const __m512bh k = (__m512bh)_mm512_loadu_si512(row + h * dim + c * 32);
          for (int g = 0; g < G; ++g)
            acc[g] = _mm512_dpbf16_ps(
                acc[g], (__m512bh)_mm512_loadu_si512(qh + g * dim + c * 32), k);
        }
        for (int g = 0; g < G; ++g) part[(h * G + g) * kLanes + j] = (vec16)acc[g];
      }
    }
    for (int64_t r = 0; r < heads; ++r)
      store16(scores.data() + r * cnt + (t - first), hsum16(&part[r * kLanes]) * scale, n);
    t += n;
  }
  for (int64_t r = 0; r < heads; ++r) inv[r] = exp_shifted(scores.data() + r * cnt, cnt);
  prefetch_next_seq(next);
  const __m512i zero = _mm512_setzero_si512();
  // Lane i of the unpacked low / high vector holds dim 8 (i / 4) + i % 4 (+ 4 for high).
  const __m512i first16 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second16 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int64_t h = 0; h < num_kv; ++h) {
    __m512 acc[G][2 * NP];
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < 2 * NP; ++c) acc[g][c] = _mm512_setzero_ps();
    const float* p = scores.data() + h * G * cnt - first;
    for (int64_t t = first; t < len;) {
      const int64_t blk = t / block_size, off = t % block_size;
      const int64_t n = std::min(block_size - off, len - t);
      const c10::BFloat16* row = vc + (int64_t(table[blk]) * block_size + off) * token_stride + h * dim;
      for (int64_t j = 0; j < n; ++j, row += token_stride) {
        for (int c = 0; c < NP; ++c) {
          const __m512i v = _mm512_loadu_si512(row + c * 32);
          const __m512 lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, v));
          const __m512 hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, v));
          for (int g = 0; g < G; ++g) {
            const __m512 w = _mm512_set1_ps(p[g * cnt + t + j]);
            acc[g][2 * c] = _mm512_fmadd_ps(w, lo, acc[g][2 * c]);
            acc[g][2 * c + 1] = _mm512_fmadd_ps(w, hi, acc[g][2 * c + 1]);
          }
        }
      }
      t += n;
    }
    for (int g = 0; g < G; ++g) {
      const __m512 norm = _mm512_set1_ps(inv[h * G + g]);
      float* o = out + (h * G + g) * dim;
      for (int c = 0; c < NP; ++c) {
        const __m512 lo = acc[g][2 * c], hi = acc[g][2 * c + 1];
        _mm512_storeu_ps(o + c * 32, _mm512_mul_ps(_mm512_permutex2var_ps(lo, first16, hi), norm));
        _mm512_storeu_ps(o + c * 32 + 16, _mm512_mul_ps(_mm512_permutex2var_ps(lo, second16, hi), norm));
      }
    }
  }
}

using DecodeDpFn = void (*)(const c10::BFloat16*, const c10::BFloat16*, const c10::BFloat16*,
                            const int32_t*, int64_t, int64_t, int64_t, int64_t, float, float*,
                            std::vector<float>&, const NextSeq<c10::BFloat16>&);

template <int NP>
DecodeDpFn pick_dp_group(int64_t group) {
  switch (group) {
    case 1: return decode_dp<NP, 1>;
    case 2: return decode_dp<NP, 2>;
    case 3: return decode_dp<NP, 3>;
    case 4: return decode_dp<NP, 4>;
    default: return nullptr;  // G x 2NP accumulators would not fit the registers
  }
}

// decode_dp for this head shape, or nullptr (decode_vec then).
DecodeDpFn pick_dp(int64_t group, int64_t dim) {
  if (dim == 32) return pick_dp_group<1>(group);
  if (dim == 64) return pick_dp_group<2>(group);
  if (dim == 128 && group <= 2) return pick_dp_group<4>(group);
  return nullptr;
}
#endif

template <typename T>
using DecodeFn = void (*)(const float*, const T*, const T*, const int32_t*, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, float, float*,
                          std::vector<float>&, const NextSeq<T>&);

template <int NV, typename T>
DecodeFn<T> pick_vec(int64_t group) {
  switch (group) {
    case 1: return decode_vec<NV, 1, T>;
    case 2: return decode_vec<NV, 2, T>;
    case 3: return decode_vec<NV, 3, T>;
    case 4: return decode_vec<NV, 4, T>;
    case 8: return decode_vec<NV, 8, T>;
    default: return nullptr;
  }
}

template <typename T>
DecodeFn<T> pick(int64_t group, int64_t dim) {
  DecodeFn<T> fn = nullptr;
  if (dim == 32) fn = pick_vec<2, T>(group);
  if (dim == 64) fn = pick_vec<4, T>(group);
  if (dim == 128) fn = pick_vec<8, T>(group);
  if (dim == 256) fn = pick_vec<16, T>(group);
  if (fn != nullptr) return fn;
  switch (group) {
    case 1: return decode_one<1, T>;
    case 2: return decode_one<2, T>;
    case 3: return decode_one<3, T>;
    case 4: return decode_one<4, T>;
    case 8: return decode_one<8, T>;
    default: return decode_one<0, T>;  // any other group size, one query head at a time
  }
}

// A sequence's fixed cost in decode_all's split, in keys' worth of work (query and output
// rows, the softmax's passes).
constexpr int64_t kSeqOverheadKeys = 16;

// Each sequence's query row is widened into an fp32 scratch row and its output rounded back
// to T from one: no fp32 copies of the whole query and output per layer.
template <typename T>
void decode_all(const T* q, int64_t q_stride, const T* kc, const T* vc, const int32_t* tables,
                const int32_t* lens, int64_t batch, int64_t heads, int64_t dim,
                int64_t block_size, int64_t num_kv, int64_t max_blocks, double scale,
                int64_t window, T* o) {
  const int64_t group = heads / num_kv, width = heads * dim, token_stride = num_kv * dim;
  const DecodeFn<T> decode_one_seq = pick<T>(group, dim);
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  const DecodeDpFn decode_dp_seq = std::is_same_v<T, c10::BFloat16> ? pick_dp(group, dim) : nullptr;
#endif
  // Each thread takes a contiguous run of sequences with about an equal share of the keys to
  // read, not an equal count: a running batch lists its oldest (longest) sequences first, so
  // equal counts gave the first thread the most work (a served batch of 64 spans 129 to 256
  // keys). Which thread computes a sequence does not change its result.
  const int64_t runs = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), batch));
  std::vector<int64_t> bounds(runs + 1, batch);
  bounds[0] = 0;
  auto keys = [&](int64_t i) {
    const int64_t len = lens[i];
    return (window > 0 ? std::min(len, window) : len) + kSeqOverheadKeys;
  };
  int64_t total = 0;
  for (int64_t i = 0; i < batch; ++i) total += keys(i);
  for (int64_t i = 0, run = 1, sum = 0; i < batch && run < runs; ++i) {
    sum += keys(i);
    while (run < runs && sum * runs >= total * run) bounds[run++] = i + 1;
  }
  at::parallel_for(0, runs, 1, [&](int64_t run_begin, int64_t run_end) {
    std::vector<float> scores, q32(width), o32(width);
    auto first_key = [&](int64_t i) { return window > 0 ? std::max<int64_t>(0, lens[i] - window) : 0; };
    const int64_t end = bounds[run_end];
    for (int64_t i = bounds[run_begin]; i < end; ++i) {
      const int64_t len = lens[i];
      const int64_t first = first_key(i);
      NextSeq<T> next;
      if (i + 1 < end) {
        const int64_t slot = int64_t(tables[(i + 1) * max_blocks + first_key(i + 1) / block_size]) * block_size;
        next = {kc + slot * token_stride, vc + slot * token_stride, block_size * token_stride};
      }
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
      if constexpr (std::is_same_v<T, c10::BFloat16>) {
        if (decode_dp_seq != nullptr) {
          decode_dp_seq(q + i * q_stride, kc, vc, tables + i * max_blocks, first, len,
                        block_size, num_kv, float(scale), o32.data(), scores, next);
          over_lanes(width, [&](int64_t j, auto m) { store16(o + i * width + j, load16(o32.data() + j, m), m); });
          continue;
        }
      }
#endif
      over_lanes(width, [&](int64_t j, auto m) { store16(q32.data() + j, load16(q + i * q_stride + j, m), m); });
      decode_one_seq(q32.data(), kc, vc, tables + i * max_blocks, first, len, block_size,
                     num_kv, group, dim, float(scale), o32.data(), scores, next);
      over_lanes(width, [&](int64_t j, auto m) { store16(o + i * width + j, load16(o32.data() + j, m), m); });
    }
  });
}

// ---- Prefill: many query rows of one sequence (a prompt, or a chunk of one) ----
// A tile of up to 16 consecutive rows of one query head is held transposed, [D][16 rows], so
// one key's scores for all 16 rows are a single vector of FMAs over d, and a chunk of up to 16
// keys yields each row's running max and sum as lane-wise vector ops (no horizontal sums).
// Values are then added row by row, weights broadcast. Keys come in chunks that never cross a
// cache block; the query heads sharing a kv head take each chunk in turn, so a bf16 chunk's
// values are widened to fp32 once for all of them. bf16 scores use AVX512_BF16 pair dot
// products where the CPU has them (keys read as they are: prefill_scores_dp), else a widened
// copy of the keys too. The softmax is online (running max and sum per row), all in fp32;
// keys after a tile's last row are never visited.
constexpr int64_t kTile = kLanes;   // query rows per tile: one per lane
constexpr int64_t kChunk = kLanes;  // keys per chunk

struct PrefillScratch {
  std::vector<float> qt, keys, values, weights, acc;
  std::vector<uint32_t> qpairs;  // bf16 with AVX512_BF16: the tile's query as [D / 2][16] pairs
  PrefillScratch(int64_t group, int64_t dim)
      : qt(group * dim * kTile), keys(kChunk * dim), values(kChunk * dim),
        weights(kChunk * kTile), acc(group * kTile * dim), qpairs(group * dim / 2 * kTile) {}
};

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
// bf16 prefill scores by pair dot products: lane r of s[j] += q[r] . k[j] over the query's
// [D / 2][16] pairs (qpairs) and a chunk's n key rows read straight from the cache, two
// products per instruction summed in fp32 (the keys are not widened). Scaled afterwards, as
// decode_dp does. Lanes and keys past the tile's rows / n stay zero.
template <int NV>
inline void prefill_scores_dp(const uint32_t* qpairs, const c10::BFloat16* keys, int64_t n,
                              int64_t token_stride, float scale, vec16* s) {
  constexpr int64_t pairs = NV * kLanes / 2;
  for (int64_t j = 0; j < n; ++j) {
    const auto* k = reinterpret_cast<const uint32_t*>(keys + j * token_stride);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p += 2) {
      acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(qpairs + p * kLanes),
                              (__m512bh)_mm512_set1_epi32(static_cast<int>(k[p])));
      acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(qpairs + (p + 1) * kLanes),
                              (__m512bh)_mm512_set1_epi32(static_cast<int>(k[p + 1])));
    }
    s[j] = (vec16)_mm512_add_ps(acc0, acc1) * scale;
  }
}
#endif

// A chunk's rows as fp32: in place for an fp32 cache (row stride token_stride), else widened
// into buf (row stride dim). Rows past n are zeros in buf; `whole` asks for all kChunk rows
// to be readable (the score loop reads every one of them).
template <typename T>
const float* chunk_rows(const T* src, int64_t n, int64_t token_stride, int64_t dim, bool whole,
                        float* buf, int64_t& stride) {
  if constexpr (std::is_same_v<T, float>) {
    if (n == kChunk || !whole) {
      stride = token_stride;
      return src;
    }
  }
  stride = dim;
  for (int64_t j = 0; j < kChunk; ++j)
    for (int64_t d = 0; d < dim; ++d) buf[j * dim + d] = j < n ? widen(src[j * token_stride + d]) : 0.f;
  return buf;
}

// Rows [0, rows) of a tile for the G query heads of one kv head: row r is at position
// pos0 + r; head g's query at q + g * qh + r * qs and its output at o + g * oh + r * os.
// kc / vc point at the kv head's slice of cache slot 0. NV > 0: dim = 16 * NV, known at
// compile time, so a row's accumulators stay in registers while it adds the chunk's values.
template <int NV, typename T>
void prefill_tile(const T* q, int64_t qs, int64_t qh, int64_t group, int64_t rows,
                  int64_t pos0, const T* kc, const T* vc, const int32_t* table,
                  int64_t block_size, int64_t token_stride, int64_t dim_, float scale,
                  int64_t window, T* o, int64_t os, int64_t oh, PrefillScratch& w) {
  const int64_t dim = NV > 0 ? NV * kLanes : dim_;
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  constexpr bool dp = std::is_same_v<T, c10::BFloat16> && NV > 0;
#else
  constexpr bool dp = false;
#endif
  for (int64_t g = 0; g < group; ++g) {
    if constexpr (dp) {
      uint32_t* qp = w.qpairs.data() + g * dim / 2 * kTile;
      for (int64_t d = 0; d < dim / 2; ++d)
        for (int64_t r = 0; r < kTile; ++r) {
          uint32_t pair = 0;
          if (r < rows) std::memcpy(&pair, q + g * qh + r * qs + 2 * d, sizeof pair);
          qp[d * kTile + r] = pair;
        }
    } else {
      float* qt = w.qt.data() + g * dim * kTile;
      for (int64_t d = 0; d < dim; ++d)
        for (int64_t r = 0; r < kTile; ++r)
          qt[d * kTile + r] = r < rows ? widen(q[g * qh + r * qs + d]) * scale : 0.f;
    }
  }
  std::fill(w.acc.begin(), w.acc.end(), 0.f);
  const float ninf = -std::numeric_limits<float>::infinity();
  i32x16 pos;
  for (int64_t r = 0; r < kTile; ++r) pos[r] = static_cast<int32_t>(pos0 + r);
  std::vector<vec16> run_max(group, vec16{} + ninf), run_sum(group, vec16{});
  const int64_t last = pos0 + rows - 1;
  for (int64_t t = window > 0 ? std::max<int64_t>(0, pos0 - window + 1) : 0; t <= last;) {
    const int64_t off = t % block_size;
    const int64_t n = std::min({block_size - off, last + 1 - t, kChunk});
    const int64_t slot = int64_t(table[t / block_size]) * block_size + off;
    int64_t ks = 0, vs;
    const float* keys = dp ? nullptr
                           : chunk_rows(kc + slot * token_stride, n, token_stride, dim, true,
                                        w.keys.data(), ks);
    const float* values = chunk_rows(vc + slot * token_stride, n, token_stride, dim, false,
                                     w.values.data(), vs);
    i32x16 seen[kChunk];
    for (int64_t j = 0; j < kChunk; ++j) {
      const int32_t key = static_cast<int32_t>(t + j);
      seen[j] = pos >= key;
      if (window > 0) seen[j] &= pos < key + static_cast<int32_t>(window);
      if (j >= n) seen[j] = i32x16{};
    }
    for (int64_t g = 0; g < group; ++g) {
      vec16 s[kChunk] = {};
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
      if constexpr (dp) {
        prefill_scores_dp<(NV > 0 ? NV : 1)>(w.qpairs.data() + g * dim / 2 * kTile,
                                             kc + slot * token_stride, n, token_stride, scale, s);
      }
#endif
      if constexpr (!dp) {
        const float* qt = w.qt.data() + g * dim * kTile;
        for (int64_t d = 0; d < dim; ++d) {
          const vec16 qd = load16(qt + d * kTile);
          for (int64_t j = 0; j < kChunk; ++j) s[j] += qd * keys[j * ks + d];
        }
      }
      vec16 mx = run_max[g];
      for (int64_t j = 0; j < kChunk; ++j) {
        s[j] = seen[j] ? s[j] : ninf;
        mx = mx > s[j] ? mx : s[j];
      }
      // A row that has seen no key yet (max still -inf) keeps zero weights and sums.
      const vec16 corr = run_max[g] == ninf ? vec16{} : exp16(run_max[g] - mx);
      vec16 sum = {};
      for (int64_t j = 0; j < kChunk; ++j) {
        const vec16 p = s[j] == ninf ? vec16{} : exp16(s[j] - mx);
        sum += p;
        store16(w.weights.data() + j * kTile, p);
      }
      run_sum[g] = run_sum[g] * corr + sum;
      run_max[g] = mx;
      for (int64_t r = 0; r < rows; ++r) {
        float* a = w.acc.data() + (g * kTile + r) * dim;
        const float c = corr[r];
        if constexpr (NV > 0) {
          vec16 v[NV];
          for (int i = 0; i < NV; ++i) v[i] = load16(a + i * kLanes) * c;
          for (int64_t j = 0; j < n; ++j) {
            const float p = w.weights[j * kTile + r];
            for (int i = 0; i < NV; ++i) v[i] += p * load16(values + j * vs + i * kLanes);
          }
          for (int i = 0; i < NV; ++i) store16(a + i * kLanes, v[i]);
        } else {
          over_lanes(dim, [&](int64_t d, auto m) {
            vec16 v = load16(a + d, m) * c;
            for (int64_t j = 0; j < n; ++j)
              v += w.weights[j * kTile + r] * load16(values + j * vs + d, m);
            store16(a + d, v, m);
          });
        }
      }
    }
    t += n;
  }
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = 1.f / run_sum[g][r];
      const float* a = w.acc.data() + (g * kTile + r) * dim;
      over_lanes(dim, [&](int64_t d, auto m) {
        store16(o + g * oh + r * os + d, load16(a + d, m) * inv, m);
      });
    }
  }
}

}  // namespace

// Causal attention of every listed sequence's query rows over its cached keys (this step's
// included: they are written to the cache first). query [T, H, D] (last dim contiguous);
// caches [num_blocks, block_size, Hkv, D] contiguous, of the query's dtype (fp32 or bf16);
// block_tables [B, max_blocks] int32; seqs [P, 4] int64 rows (block-table row, first query
// row, query rows, keys), the query rows being the sequence's last positions; window: each row
// sees its last `window` keys only, or 0 for all. Writes those rows of out [T, H, D].
void paged_prefill(const torch::Tensor& query, const torch::Tensor& key_cache,
                   const torch::Tensor& value_cache, const torch::Tensor& block_tables,
                   const torch::Tensor& seqs, double scale, int64_t window, torch::Tensor out) {
  const auto dtype = key_cache.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kBFloat16,
              "paged_prefill: a float32 or bfloat16 cache");
  TORCH_CHECK(query.scalar_type() == dtype && value_cache.scalar_type() == dtype &&
                  out.scalar_type() == dtype,
              "paged_prefill: query, keys, values and out of one dtype");
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous() && out.is_contiguous(),
              "paged_prefill: contiguous caches and out");
  TORCH_CHECK(query.dim() == 3 && query.stride(2) == 1 && out.sizes() == query.sizes(),
              "paged_prefill: query [T, H, D] with contiguous rows, out of its shape");
  TORCH_CHECK(block_tables.dtype() == torch::kInt32 && seqs.dtype() == torch::kInt64 &&
                  seqs.dim() == 2 && seqs.size(1) == 4,
              "paged_prefill: int32 block tables and [P, 4] int64 seqs");
  const auto tables = block_tables.contiguous();
  const auto list = seqs.contiguous();
  const int64_t heads = query.size(1), dim = query.size(2), tokens = query.size(0);
  const int64_t block_size = key_cache.size(1), num_kv = key_cache.size(2);
  const int64_t max_blocks = tables.size(1), group = heads / num_kv;
  TORCH_CHECK(heads % num_kv == 0 && key_cache.size(3) == dim, "paged_prefill: bad head shapes");
  const int64_t* sp = list.data_ptr<int64_t>();
  // One work item per (sequence, kv head, tile of rows). A tile's cost grows with its
  // position (more keys before it); threads take contiguous runs of items, so tiles are
  // listed first, last, second, second to last, ... to even the runs out.
  std::vector<std::array<int64_t, 3>> items;
  for (int64_t i = 0; i < list.size(0); ++i) {
    const int64_t row = sp[i * 4], start = sp[i * 4 + 1], q_len = sp[i * 4 + 2];
    const int64_t k_len = sp[i * 4 + 3];
    TORCH_CHECK(row >= 0 && row < tables.size(0) && start >= 0 && q_len >= 1 &&
                    start + q_len <= tokens && q_len <= k_len &&
                    k_len <= max_blocks * block_size,
                "paged_prefill: sequence ", i, " out of range");
    const int64_t tiles = (q_len + kTile - 1) / kTile;
    for (int64_t f = 0; f < tiles; ++f) {
      const int64_t tile = f % 2 == 0 ? f / 2 : tiles - 1 - f / 2;
      for (int64_t h = 0; h < num_kv; ++h) items.push_back({i, h, tile * kTile});
    }
  }
  const int64_t token_stride = num_kv * dim;
  const int64_t qs0 = query.stride(0), qs1 = query.stride(1);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    auto tile = prefill_tile<0, T>;
    if (dim == 32) tile = prefill_tile<2, T>;
    if (dim == 64) tile = prefill_tile<4, T>;
    if (dim == 128) tile = prefill_tile<8, T>;
    if (dim == 256) tile = prefill_tile<16, T>;
    const T* qp = query.data_ptr<T>();
    const T* kc = key_cache.data_ptr<T>();
    const T* vc = value_cache.data_ptr<T>();
    T* op = out.data_ptr<T>();
    at::parallel_for(0, static_cast<int64_t>(items.size()), 1, [&](int64_t b, int64_t e) {
      PrefillScratch scratch(group, dim);
      for (int64_t it = b; it < e; ++it) {
        const auto [i, h, r0] = items[it];
        const int64_t start = sp[i * 4 + 1], q_len = sp[i * 4 + 2], k_len = sp[i * 4 + 3];
        const int64_t head0 = h * group;
        tile(qp + (start + r0) * qs0 + head0 * qs1, qs0, qs1, group,
                     std::min(kTile, q_len - r0), k_len - q_len + r0, kc + h * dim,
                     vc + h * dim, tables.data_ptr<int32_t>() + sp[i * 4] * max_blocks,
                     block_size, token_stride, dim, float(scale), window,
                     op + (start + r0) * heads * dim + head0 * dim, heads * dim, dim, scratch);
      }
    });
  };
  if (dtype == torch::kFloat32) {
    run(float{});
  } else {
    run(c10::BFloat16{});
  }
}

// query [B, H, D]; caches [num_blocks, block_size, Hkv, D] contiguous, fp32 or bf16 (the
// query in the cache's dtype); block_tables [B, max_blocks] int32; seq_lens [B] int32;
// window: attend to the last `window` keys only (a sliding-window layer), or 0 for all.
// Returns [B, H, D] in the query's dtype, computed in fp32.
torch::Tensor paged_decode(torch::Tensor query, torch::Tensor key_cache, torch::Tensor value_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens, double scale,
                           int64_t window) {
  const auto dtype = key_cache.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kBFloat16,
              "paged_decode: a float32 or bfloat16 cache");
  TORCH_CHECK(query.scalar_type() == dtype && value_cache.scalar_type() == dtype,
              "paged_decode: query, keys and values of one dtype");
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous(),
              "paged_decode: contiguous caches");
  TORCH_CHECK(block_tables.dtype() == torch::kInt32 && seq_lens.dtype() == torch::kInt32,
              "paged_decode: int32 block tables and seq_lens");
  TORCH_CHECK(query.dim() == 3, "paged_decode: query [B, H, D]");
  // Rows may be strided (q is a view of the fused qkv projection); heads x dim contiguous.
  if (query.stride(2) != 1 || query.stride(1) != query.size(2)) query = query.contiguous();
  block_tables = block_tables.contiguous();
  seq_lens = seq_lens.contiguous();
  const int64_t batch = query.size(0), heads = query.size(1), dim = query.size(2);
  const int64_t block_size = key_cache.size(1), num_kv = key_cache.size(2);
  const int64_t max_blocks = block_tables.size(1);
  auto out = torch::empty({batch, heads, dim}, query.options());
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  if (dtype == torch::kFloat32) {
    decode_all<float>(query.data_ptr<float>(), query.stride(0), key_cache.data_ptr<float>(),
                      value_cache.data_ptr<float>(), tables, lens, batch, heads, dim,
                      block_size, num_kv, max_blocks, scale, window, out.data_ptr<float>());
  } else {
    decode_all<c10::BFloat16>(query.data_ptr<c10::BFloat16>(), query.stride(0),
                              key_cache.data_ptr<c10::BFloat16>(),
                              value_cache.data_ptr<c10::BFloat16>(), tables, lens, batch, heads,
                              dim, block_size, num_kv, max_blocks, scale, window,
                              out.data_ptr<c10::BFloat16>());
  }
  return out;
}

// key, value [T, Hkv, D] (rows may be strided; heads x dim contiguous) into the caches
// [blocks, block_size, Hkv, D] at flat slots [T] int64 (block * block_size + offset); a
// negative slot (a padded row) is skipped. One copy of each row (index_copy_ cost 20 us a
// call for a 64-row decode batch, most of it dispatch).
void write_kv(torch::Tensor key, torch::Tensor value, torch::Tensor key_cache,
              torch::Tensor value_cache, torch::Tensor slots) {
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes(), "write_kv: key, value [T, Hkv, D]");
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous() &&
                  key_cache.sizes() == value_cache.sizes() && key_cache.dim() == 4 &&
                  key_cache.size(2) == key.size(1) && key_cache.size(3) == key.size(2),
              "write_kv: caches [blocks, block_size, Hkv, D] matching the keys");
  TORCH_CHECK(key.scalar_type() == key_cache.scalar_type() &&
                  value.scalar_type() == key_cache.scalar_type() &&
                  value_cache.scalar_type() == key_cache.scalar_type(),
              "write_kv: keys, values and caches of one dtype");
  TORCH_CHECK(slots.dtype() == torch::kInt64 && slots.dim() == 1 && slots.size(0) == key.size(0),
              "write_kv: int64 slots, one per row");
  for (auto* t : {&key, &value}) {
    if (t->stride(2) != 1 || t->stride(1) != t->size(2)) *t = t->contiguous();
  }
  slots = slots.contiguous();
  const int64_t rows = key.size(0), width = key.size(1) * key.size(2);
  const int64_t capacity = key_cache.size(0) * key_cache.size(1);
  const int64_t bytes = width * key.element_size();
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows; ++i)
    TORCH_CHECK(slot[i] < capacity, "write_kv: slot ", slot[i], " past the cache's ", capacity);
  const auto* k = static_cast<const char*>(key.data_ptr());
  const auto* v = static_cast<const char*>(value.data_ptr());
  auto* kc = static_cast<char*>(key_cache.data_ptr());
  auto* vc = static_cast<char*>(value_cache.data_ptr());
  const int64_t ks = key.stride(0) * key.element_size(), vs = value.stride(0) * value.element_size();
  at::parallel_for(0, rows, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (slot[i] < 0) continue;
      std::memcpy(kc + slot[i] * bytes, k + i * ks, bytes);
      std::memcpy(vc + slot[i] * bytes, v + i * vs, bytes);
    }
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "Paged decode attention on CPU (float32 or bfloat16 cache)");
  m.def("paged_prefill", &paged_prefill, "Paged causal attention of prompt rows on CPU");
  m.def("write_kv", &write_kv, "Copy key and value rows into the paged caches at their slots");
}
