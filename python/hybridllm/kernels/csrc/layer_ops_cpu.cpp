// The elementwise ops of a decoder layer on CPU, each one pass over its rows with the rows
// split across torch's threads: RMSNorm (with the residual add before it), SiLU-and-mul, and
// rotary embedding of q and k in place.
//
// Why: torch runs each of these as 5-12 separate ops with fp32 temporaries. In a decode step
// that is ~40 op dispatches a layer; in a 2,048-token bf16 prefill the temporaries' traffic
// (conversions, multiplies, a cat) cost more than the attention. Arithmetic is fp32, and a
// bf16 result is rounded where the torch reference (models/layers.py) rounds it, so both give
// the same values up to the order of an fp32 sum.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "cpu_vec.h"

namespace {

using namespace hybridllm_cpu;

// Rows per thread chunk: about 64 K elements, so a decode step's few rows run on one thread
// without the cost of waking the others.
inline int64_t row_grain(int64_t width) { return std::max<int64_t>(1, 65536 / width); }

template <typename Fn>
void with_dtype(const torch::Tensor& t, const char* op, Fn&& fn) {
  if (t.scalar_type() == torch::kFloat32) {
    fn(float{});
  } else {
    TORCH_CHECK(t.scalar_type() == torch::kBFloat16, op, ": float32 or bfloat16 tensors");
    fn(c10::BFloat16{});
  }
}

// One row: y = w * round(x / rms(x)) (Llama's order: normalize in fp32, round to T, scale).
template <typename T>
void norm_row(const T* x, const T* w, int64_t n, float eps, T* y) {
  vec16 ss = {};
  over_lanes(n, [&](int64_t i, auto m) {
    const vec16 v = load16(x + i, m);
    ss += v * v;
  });
  const float inv = 1.0f / std::sqrt(hsum(ss) / static_cast<float>(n) + eps);
  over_lanes(n, [&](int64_t i, auto m) {
    store16(y + i, round_to<T>(load16(x + i, m) * inv) * load16(w + i, m), m);
  });
}

// residual += x (rounded to T), in place.
template <typename T>
void add_row(const T* x, T* residual, int64_t n) {
  over_lanes(n, [&](int64_t i, auto m) {
    store16(residual + i, load16(residual + i, m) + load16(x + i, m), m);
  });
}

void check_rows(const torch::Tensor& x, const torch::Tensor& weight, const char* op) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, op, ": x must be 2-D with contiguous rows");
  TORCH_CHECK(weight.dim() == 1 && weight.is_contiguous() && weight.size(0) == x.size(1) &&
                  weight.scalar_type() == x.scalar_type(),
              op, ": weight must be [hidden] in x's dtype");
}

}  // namespace

// x [M, N] (rows contiguous, any row stride), weight [N] -> rms_norm(x) * weight [M, N].
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  check_rows(x, weight, "rms_norm");
  const int64_t M = x.size(0), N = x.size(1), ld = x.stride(0);
  auto y = torch::empty({M, N}, x.options());
  with_dtype(x, "rms_norm", [&](auto t) {
    using T = decltype(t);
    const T* xp = x.data_ptr<T>();
    const T* wp = weight.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    at::parallel_for(0, M, row_grain(N), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) norm_row(xp + r * ld, wp, N, float(eps), yp + r * N);
    });
  });
  return y;
}

// residual += x in place (both [M, N] contiguous); returns rms_norm(residual) * weight.
torch::Tensor add_rms_norm(const torch::Tensor& x, torch::Tensor residual,
                           const torch::Tensor& weight, double eps) {
  check_rows(residual, weight, "add_rms_norm");
  TORCH_CHECK(x.is_contiguous() && residual.is_contiguous() && x.sizes() == residual.sizes() &&
                  x.scalar_type() == residual.scalar_type(),
              "add_rms_norm: x and residual must be contiguous, of one shape and dtype");
  const int64_t M = x.size(0), N = x.size(1);
  auto y = torch::empty({M, N}, x.options());
  with_dtype(x, "add_rms_norm", [&](auto t) {
    using T = decltype(t);
    const T* xp = x.data_ptr<T>();
    T* rp = residual.data_ptr<T>();
    const T* wp = weight.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    at::parallel_for(0, M, row_grain(N), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        add_row(xp + r * N, rp + r * N, N);
        norm_row(rp + r * N, wp, N, float(eps), yp + r * N);
      }
    });
  });
  return y;
}

// gate_up [M, 2I] contiguous -> silu(gate) * up [M, I] (rounded to the dtype after the SiLU
// and after the product, as F.silu then mul do). A new contiguous tensor, as the next linear
// wants it: an in-place result would be a strided view, copied again before the GEMM.
torch::Tensor silu_and_mul(const torch::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.is_contiguous() && gate_up.size(1) % 2 == 0,
              "silu_and_mul: gate_up must be a contiguous [tokens, 2 * intermediate] tensor");
  const int64_t M = gate_up.size(0), I = gate_up.size(1) / 2;
  auto out = torch::empty({M, I}, gate_up.options());
  with_dtype(gate_up, "silu_and_mul", [&](auto t) {
    using T = decltype(t);
    const T* p = gate_up.data_ptr<T>();
    T* op = out.data_ptr<T>();
    at::parallel_for(0, M, row_grain(2 * I), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* g = p + r * 2 * I;
        const T* u = g + I;
        T* o = op + r * I;
        over_lanes(I, [&](int64_t i, auto m) {
          const vec16 x = load16(g + i, m);
          const vec16 silu = round_to<T>(x / (1.0f + exp16(-x)));
          store16(o + i, silu * load16(u + i, m), m);
        });
      }
    });
  });
  return out;
}

namespace {

// One token's heads [heads, D] at x (head stride hs) rotated by rotate-half RoPE in place.
template <typename T>
void rotate_heads(T* x, int64_t heads, int64_t hs, int64_t half, const float* cos,
                  const float* sin) {
  for (int64_t h = 0; h < heads; ++h) {
    T* a = x + h * hs;
    T* b = a + half;
    over_lanes(half, [&](int64_t i, auto m) {
      const vec16 x1 = load16(a + i, m), x2 = load16(b + i, m);
      const vec16 c = load16(cos + i, m), s = load16(sin + i, m);
      store16(a + i, x1 * c - x2 * s, m);
      store16(b + i, x2 * c + x1 * s, m);
    });
  }
}

}  // namespace

// q [T, H, D] and k [T, Hkv, D] (last dim contiguous, any other strides: views of the fused
// qkv output) rotated in place; positions [T] int64; cos_sin [max_pos, D] fp32 (cos | sin).
void rotary_qk_(torch::Tensor q, torch::Tensor k, const torch::Tensor& positions,
                const torch::Tensor& cos_sin) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.stride(2) == 1 && k.stride(2) == 1 &&
                  q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(2) % 2 == 0 &&
                  q.scalar_type() == k.scalar_type(),
              "rotary_qk_: q [T, H, D] and k [T, Hkv, D] of one dtype, last dim contiguous");
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == q.size(0) &&
                  positions.scalar_type() == torch::kInt64,
              "rotary_qk_: positions must be [T] int64");
  TORCH_CHECK(cos_sin.dim() == 2 && cos_sin.is_contiguous() &&
                  cos_sin.scalar_type() == torch::kFloat32 && cos_sin.size(1) == q.size(2),
              "rotary_qk_: cos_sin must be contiguous [max_pos, D] fp32");
  const int64_t tokens = q.size(0), D = q.size(2), half = D / 2, max_pos = cos_sin.size(0);
  const auto pos = positions.contiguous();
  const int64_t* pp = pos.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(pp[t] >= 0 && pp[t] < max_pos, "rotary_qk_: position ", pp[t],
                " outside the table of ", max_pos);
  }
  const float* cs = cos_sin.data_ptr<float>();
  with_dtype(q, "rotary_qk_", [&](auto t) {
    using T = decltype(t);
    T* qp = q.data_ptr<T>();
    T* kp = k.data_ptr<T>();
    const int64_t heads = q.size(1), kv_heads = k.size(1);
    at::parallel_for(0, tokens, row_grain((heads + kv_heads) * D), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float* cos = cs + pp[r] * D;
        rotate_heads(qp + r * q.stride(0), heads, q.stride(1), half, cos, cos + half);
        rotate_heads(kp + r * k.stride(0), kv_heads, k.stride(1), half, cos, cos + half);
      }
    });
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "RMSNorm of each row (Llama's rounding order)");
  m.def("add_rms_norm", &add_rms_norm, "residual += x in place; RMSNorm of the new residual");
  m.def("silu_and_mul", &silu_and_mul, "silu(gate) * up, a new [tokens, intermediate] tensor");
  m.def("rotary_qk_", &rotary_qk_, "Rotate-half RoPE on q and k in place");
}
