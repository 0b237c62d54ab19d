// Paged decode attention on CPU: one query token per sequence, keys and values read in place
// from the paged cache through the block table. The torch path must first gather every
// sequence's blocks into a dense buffer (one extra write and read of all KV bytes per layer);
// decode attention is memory-bound, so reading the cache once is what makes it fast.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

constexpr int64_t kLanes = 16;

// A dot product in kLanes independent partial sums: the compiler vectorizes this without
// -ffast-math (a single running sum would pin it to scalar order).
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {0.f};
  int64_t d = 0;
  for (; d + kLanes <= n; d += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += a[d + j] * b[d + j];
  }
  float sum = 0.f;
  for (int64_t j = 0; j < kLanes; ++j) sum += acc[j];
  for (; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// out[i, h*G + g, :] = softmax(scale * q . K_i) V_i for the G query heads of kv head h.
void decode_one(const float* q, const float* kc, const float* vc, const int32_t* table,
                int64_t len, int64_t block_size, int64_t num_kv, int64_t head, int64_t group,
                int64_t dim, float scale, float* out, std::vector<float>& scores) {
  scores.assign(group * len, 0.f);
  const int64_t token_stride = num_kv * dim;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t slot = int64_t(table[t / block_size]) * block_size + t % block_size;
    const float* k = kc + slot * token_stride + head * dim;
    for (int64_t g = 0; g < group; ++g) {
      scores[g * len + t] = dot(q + g * dim, k, dim) * scale;
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores.data() + g * len;
    const float mx = *std::max_element(s, s + len);
    float sum = 0.f;
    for (int64_t t = 0; t < len; ++t) {
      s[t] = std::exp(s[t] - mx);
      sum += s[t];
    }
    const float inv = 1.f / sum;
    for (int64_t t = 0; t < len; ++t) s[t] *= inv;
  }
  std::fill(out, out + group * dim, 0.f);
  for (int64_t t = 0; t < len; ++t) {
    const int64_t slot = int64_t(table[t / block_size]) * block_size + t % block_size;
    const float* v = vc + slot * token_stride + head * dim;
    for (int64_t g = 0; g < group; ++g) {
      const float p = scores[g * len + t];
      float* o = out + g * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] += p * v[d];
    }
  }
}

}  // namespace

// query [B, H, D] f32 contiguous; caches [num_blocks, block_size, Hkv, D] f32 contiguous;
// block_tables [B, max_blocks] int32; seq_lens [B] int32. Returns [B, H, D].
torch::Tensor paged_decode(torch::Tensor query, torch::Tensor key_cache, torch::Tensor value_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens, double scale) {
  TORCH_CHECK(query.dtype() == torch::kFloat32 && key_cache.dtype() == torch::kFloat32,
              "paged_decode: float32 only");
  TORCH_CHECK(block_tables.dtype() == torch::kInt32 && seq_lens.dtype() == torch::kInt32,
              "paged_decode: int32 block tables and seq_lens");
  query = query.contiguous();
  block_tables = block_tables.contiguous();
  const int64_t batch = query.size(0), heads = query.size(1), dim = query.size(2);
  const int64_t block_size = key_cache.size(1), num_kv = key_cache.size(2);
  const int64_t group = heads / num_kv, max_blocks = block_tables.size(1);
  auto out = torch::empty_like(query);
  const float* q = query.data_ptr<float>();
  const float* kc = key_cache.data_ptr<float>();
  const float* vc = value_cache.data_ptr<float>();
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, batch * num_kv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t work = begin; work < end; ++work) {
      const int64_t i = work / num_kv, h = work % num_kv;
      const int64_t row = (i * heads + h * group) * dim;
      decode_one(q + row, kc, vc, tables + i * max_blocks, lens[i], block_size, num_kv, h,
                 group, dim, float(scale), o + row, scores);
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "Paged decode attention on CPU (float32)");
}
