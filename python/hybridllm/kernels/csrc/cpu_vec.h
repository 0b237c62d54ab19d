// Vector helpers shared by the CPU kernels: 16 fp32 lanes as a GCC/Clang vector type (lowered
// to the widest registers the target has: one AVX-512 register, two AVX2 ones), bf16 loads
// widened exactly and stores rounded to nearest even (by AVX512_BF16's conversion where the
// CPU has it), and an exp the compiler vectorizes.
#pragma once

#include <c10/util/BFloat16.h>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace hybridllm_cpu {

// For the few-instruction helpers below: left to itself GCC kept store16 an out-of-line call
// in the linear kernel's tiles (about 2 % of a decode step, with a memmove per call).
#define HYBRIDLLM_INLINE inline __attribute__((always_inline))

constexpr int64_t kLanes = 16;
typedef float vec16 __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t i32x16 __attribute__((vector_size(kLanes * sizeof(int32_t))));
typedef uint32_t u32x16 __attribute__((vector_size(kLanes * sizeof(uint32_t))));
typedef uint16_t u16x16 __attribute__((vector_size(kLanes * sizeof(uint16_t))));

// A bf16 value is the top half of an fp32: widening is exact.
inline float widen(float x) { return x; }
inline float widen(c10::BFloat16 x) { return static_cast<float>(x); }

HYBRIDLLM_INLINE vec16 as_vec(u32x16 bits) {
  vec16 v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// The first n lanes (n <= 16) from p; the others zero.
HYBRIDLLM_INLINE vec16 load16(const float* p, int64_t n = kLanes) {
  vec16 v = {};
  std::memcpy(&v, p, n * sizeof(float));  // unaligned
  return v;
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
// The first n lanes' mask.
HYBRIDLLM_INLINE __mmask16 lanes_mask(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}
#endif

HYBRIDLLM_INLINE vec16 load16(const c10::BFloat16* p, int64_t n = kLanes) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  // One zero-extending move and a shift (the generic form below compiled to twice that).
  const __m256i h = n == kLanes ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                : _mm256_maskz_loadu_epi16(lanes_mask(n), p);
  return (vec16)_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
#else
  u16x16 h = {};
  std::memcpy(&h, p, n * sizeof(uint16_t));
  return as_vec(__builtin_convertvector(h, u32x16) << 16);
#endif
}

HYBRIDLLM_INLINE void store16(float* p, vec16 v, int64_t n = kLanes) {
  std::memcpy(p, &v, n * sizeof(float));
}

#ifdef __AVX512BF16__
// fp32 lanes to bf16 by the CPU's own conversion (vcvtneps2bf16): round to nearest even as
// c10::BFloat16 does for every normal value and infinity, a NaN stays NaN; it reads an fp32
// subnormal (below 1.2e-38) as zero, where c10 keeps a bf16 subnormal.
HYBRIDLLM_INLINE __m256i to_bf16(vec16 v) {
  return (__m256i)_mm512_cvtneps_pbh((__m512)v);
}
#endif

// The first n lanes rounded to bf16, to nearest even as c10::BFloat16 does (a NaN stays NaN).
HYBRIDLLM_INLINE void store16(uint16_t* p, vec16 v, int64_t n = kLanes) {
#ifdef __AVX512BF16__
  if (n == kLanes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16(v));
  } else {
    _mm256_mask_storeu_epi16(p, lanes_mask(n), to_bf16(v));
  }
#else
  u32x16 bits;
  std::memcpy(&bits, &v, sizeof bits);
  const u32x16 rounded = (bits + (((bits >> 16) & 1u) + 0x7fffu)) >> 16;
  const u32x16 nan = (u32x16)(v != v);  // all ones where v is NaN
  const u16x16 h = __builtin_convertvector((rounded & ~nan) | (nan & 0x7fc0u), u16x16);
  std::memcpy(p, &h, n * sizeof(uint16_t));
#endif
}

HYBRIDLLM_INLINE void store16(c10::BFloat16* p, vec16 v, int64_t n = kLanes) {
  store16(reinterpret_cast<uint16_t*>(p), v, n);
}

// v rounded to T's precision and back: what storing v as T and reading it again gives.
template <typename T>
inline vec16 round_to(vec16 v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
#ifdef __AVX512BF16__
    return (vec16)_mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16(v)), 16);
#else
    u32x16 bits;
    std::memcpy(&bits, &v, sizeof bits);
    const u32x16 rounded = (bits + (((bits >> 16) & 1u) + 0x7fffu)) & 0xffff0000u;
    return v != v ? v : as_vec(rounded);
#endif
  }
}

// exp(x) in a form the compiler vectorizes (libm's expf is a scalar call per element):
// x = n ln2 + r, exp(r) by a degree-6 polynomial (Cephes' expf coefficients, ~1 ulp on
// |r| <= ln2/2), times 2^n built in the exponent bits. x is clamped to [-87, 88], where 2^n
// stays a normal float: below, a softmax weight or a sigmoid's exp is 0 for all purposes.
// The polynomial part, exp(r) for |r| <= ln2/2, on a float or on 16 lanes.
template <typename V>
inline V exp_reduced(V r) {
  V p = r * 0.0f + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

inline float exp_clamped(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float p = exp_reduced(x - n * 0.693359375f + n * 2.12194440e-4f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// exp_clamped on 16 lanes.
inline vec16 exp16(vec16 x) {
  const vec16 lo = vec16{} - 87.0f, hi = vec16{} + 88.0f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const vec16 t = x * 1.44269504088896341f + 0.5f;
  const vec16 truncated = __builtin_convertvector(__builtin_convertvector(t, i32x16), vec16);
  const vec16 n = truncated > t ? truncated - 1.0f : truncated;  // floor(t)
  const vec16 p = exp_reduced(x - n * 0.693359375f + n * 2.12194440e-4f);
  const i32x16 bits = (__builtin_convertvector(n, i32x16) + 127) << 23;
  vec16 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// fn(i, m) for i = 0, 16, 32, ... < n: m = 16 lanes (a compile-time constant, so loads and
// stores are whole vectors), then m = n - i for a shorter tail.
template <typename Fn>
inline void over_lanes(int64_t n, Fn&& fn) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) fn(i, std::integral_constant<int64_t, kLanes>{});
  if (i < n) fn(i, n - i);
}

// The 16 lanes summed by halving (a lane loop compiles to 16 extracts).
inline float hsum(vec16 v) {
  typedef float vec8 __attribute__((vector_size(32)));
  typedef float vec4 __attribute__((vector_size(16)));
  const vec8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const vec4 b =
      __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// hsum of 16 vectors at once: lane j of the result is hsum(v[j]), the same additions in the
// same order, done as 15 two-source shuffle-and-add steps instead of 16 separate reductions
// (each of which ends in scalar adds): about 3 operations a sum instead of 8.
inline vec16 hsum16(const vec16* v) {
  vec16 a[8], b[4], c[2];
  for (int p = 0; p < 8; ++p)  // lanes 0-7: v[2p]'s halves added, 8-15: v[2p + 1]'s
    a[p] = __builtin_shufflevector(v[2 * p], v[2 * p + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18,
                                   19, 20, 21, 22, 23) +
           __builtin_shufflevector(v[2 * p], v[2 * p + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                   26, 27, 28, 29, 30, 31);
  for (int q = 0; q < 4; ++q)  // 4 lanes for each of v[4q .. 4q + 3]
    b[q] = __builtin_shufflevector(a[2 * q], a[2 * q + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18,
                                   19, 24, 25, 26, 27) +
           __builtin_shufflevector(a[2 * q], a[2 * q + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
  for (int r = 0; r < 2; ++r)  // 2 lanes for each of v[8r .. 8r + 7]: (b0 + b2), (b1 + b3)
    c[r] = __builtin_shufflevector(b[2 * r], b[2 * r + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20,
                                   21, 24, 25, 28, 29) +
           __builtin_shufflevector(b[2 * r], b[2 * r + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  return __builtin_shufflevector(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                 28, 30) +
         __builtin_shufflevector(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27,
                                 29, 31);
}

}  // namespace hybridllm_cpu
