// Paged decode attention on CPU: one query token per sequence, keys and values read in place
// from the paged cache through the block table. The torch path must first gather every
// sequence's blocks into a dense buffer (one extra write and read of all KV bytes per layer);
// decode attention is memory-bound, so reading the cache once is what makes it fast.
// A bf16 cache is read as bf16 (half the bytes) and widened to fp32 in registers: every
// product and sum is fp32 whatever the cache holds.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace {

constexpr int64_t kLanes = 16;

// A bf16 value is the top half of an fp32: widening is exact.
inline float widen(float x) { return x; }
inline float widen(c10::BFloat16 x) { return static_cast<float>(x); }

// exp(x) for x <= 0 in a form the compiler vectorizes (libm's expf is a scalar call per
// element): x = n ln2 + r, exp(r) by a degree-6 polynomial (Cephes' expf coefficients,
// ~1 ulp on |r| <= ln2/2), times 2^n built in the exponent bits.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);  // below this exp underflows; its weight in a softmax is 0 anyway
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Softmax numerator in place: s[t] = exp(s[t] - max(s)). Returns 1 / sum, the normalizer.
inline float exp_shifted(float* s, int64_t len) {
  const float mx = *std::max_element(s, s + len);
  float sum = 0.f;
  for (int64_t t = 0; t < len; ++t) {
    s[t] = exp_nonpositive(s[t] - mx);
    sum += s[t];
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

template <typename T>
inline void prefetch_row(const T* row, int64_t elements) {
  constexpr int64_t kLine = 64 / sizeof(T);  // elements per 64-byte line
  for (int64_t f = 0; f < elements; f += kLine) __builtin_prefetch(row + f);
}

// out[i, :, :] = softmax(scale * q . K_i) V_i for every head of one sequence, over its keys
// first .. len - 1 (first > 0 for a sliding-window layer). Each token's keys (all kv heads)
// are one contiguous row, read once for all heads, block after block: sequential within a
// block, which the hardware prefetcher follows. Scores are indexed from `first`.
template <int G, typename T>
void decode_one(const float* q, const T* kc, const T* vc, const int32_t* table,
                int64_t first, int64_t len, int64_t block_size, int64_t num_kv, int64_t group,
                int64_t dim, float scale, float* out, std::vector<float>& scores) {
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
typedef float vec16 __attribute__((vector_size(64)));
typedef float vec8 __attribute__((vector_size(32)));
typedef float vec4 __attribute__((vector_size(16)));

inline vec16 load16(const float* p) {
  vec16 v;
  std::memcpy(&v, p, sizeof v);  // unaligned
  return v;
}

typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

// 16 bf16 values widened to fp32: each one's bits moved to the top half of a 32-bit lane.
inline vec16 load16(const c10::BFloat16* p) {
  u16x16 h;
  std::memcpy(&h, p, sizeof h);
  const u32x16 w = __builtin_convertvector(h, u32x16) << 16;
  vec16 v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}

inline void store16(float* p, vec16 v) { std::memcpy(p, &v, sizeof v); }

// The 16 lanes summed by halving (a lane loop compiles to 16 extracts).
inline float hsum(vec16 v) {
  const vec8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const vec4 b =
      __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// decode_one for head_dim = 16 * NV and G query heads per kv head, both known at compile time.
// Keys and values are visited token row by token row (all kv heads of a token are one
// contiguous row), so each block is read front to back: the hardware prefetcher streams it
// while the arithmetic runs. Visiting a block once per kv head instead (strided) measured
// 15% slower overall although it does less arithmetic. The softmax is normalized at the end.
template <int NV, int G, typename T>
void decode_vec(const float* q, const T* kc, const T* vc, const int32_t* table,
                int64_t first, int64_t len, int64_t block_size, int64_t num_kv, int64_t,
                int64_t, float scale, float* out, std::vector<float>& scores) {
  constexpr int64_t dim = NV * 16;
  const int64_t heads = num_kv * G, token_stride = num_kv * dim, cnt = len - first;
  scores.resize(heads * cnt + heads);
  float* inv = scores.data() + heads * cnt;
  for (int64_t t = first; t < len;) {
    const int64_t blk = t / block_size, off = t % block_size;
    const int64_t n = std::min(block_size - off, len - t);
    const T* row = kc + (int64_t(table[blk]) * block_size + off) * token_stride;
    for (int64_t j = 0; j < n; ++j, row += token_stride) {
      for (int64_t h = 0; h < num_kv; ++h) {
        const float* qh = q + h * G * dim;
        vec16 acc[G] = {};
        for (int c = 0; c < NV; ++c) {
          const vec16 k = load16(row + h * dim + c * 16);
          for (int g = 0; g < G; ++g) acc[g] += load16(qh + g * dim + c * 16) * k;
        }
        float* dst = scores.data() + h * G * cnt + (t - first) + j;
        for (int g = 0; g < G; ++g) dst[g * cnt] = hsum(acc[g]) * scale;
      }
    }
    t += n;
  }
  for (int64_t r = 0; r < heads; ++r) inv[r] = exp_shifted(scores.data() + r * cnt, cnt);
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

template <typename T>
using DecodeFn = void (*)(const float*, const T*, const T*, const int32_t*, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, float, float*,
                          std::vector<float>&);

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

template <typename T>
void decode_all(const float* q, const T* kc, const T* vc, const int32_t* tables,
                const int32_t* lens, int64_t batch, int64_t heads, int64_t dim,
                int64_t block_size, int64_t num_kv, int64_t max_blocks, double scale,
                int64_t window, float* o) {
  const int64_t group = heads / num_kv;
  const DecodeFn<T> decode_one_seq = pick<T>(group, dim);
  at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t len = lens[i];
      const int64_t first = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      decode_one_seq(q + i * heads * dim, kc, vc, tables + i * max_blocks, first, len,
                     block_size, num_kv, group, dim, float(scale), o + i * heads * dim, scores);
    }
  });
}

}  // namespace

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
  auto q32 = query.to(torch::kFloat32).contiguous();
  block_tables = block_tables.contiguous();
  seq_lens = seq_lens.contiguous();
  const int64_t batch = q32.size(0), heads = q32.size(1), dim = q32.size(2);
  const int64_t block_size = key_cache.size(1), num_kv = key_cache.size(2);
  const int64_t max_blocks = block_tables.size(1);
  auto out = torch::empty_like(q32);
  const float* q = q32.data_ptr<float>();
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  float* o = out.data_ptr<float>();
  if (dtype == torch::kFloat32) {
    decode_all<float>(q, key_cache.data_ptr<float>(), value_cache.data_ptr<float>(), tables,
                      lens, batch, heads, dim, block_size, num_kv, max_blocks, scale, window, o);
  } else {
    decode_all<c10::BFloat16>(q, key_cache.data_ptr<c10::BFloat16>(),
                              value_cache.data_ptr<c10::BFloat16>(), tables, lens, batch, heads,
                              dim, block_size, num_kv, max_blocks, scale, window, o);
  }
  return dtype == torch::kFloat32 ? out : out.to(dtype);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "Paged decode attention on CPU (float32 or bfloat16 cache)");
}
