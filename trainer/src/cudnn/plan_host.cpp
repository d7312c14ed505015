// run_plan_host(): the cuDNN backend's plan executed with plain loops on the host, through the same
// buffer assignment and the same explicit-padding path as the GPU, optionally rounding every stored
// value and weight to fp16/bf16 like the GPU's storage. Slow; for tests.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <stoker/error.hpp>
#include <stoker/pipeline/convert.hpp>

#include "op_math.hpp"
#include "plan.hpp"

namespace stoker::trainer::cudnn {

float round_to_storage(float v, DType dtype) {
  if (dtype == DType::F32) return v;
  if (dtype == DType::BF16) {
    const std::uint32_t u = static_cast<std::uint32_t>(convert::bf16_bits(v)) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // binary16 bits -> float
  const std::uint16_t h = convert::f16_bits(v);
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float f;
  if (exp == 0x1f) {
    const std::uint32_t u = sign | 0x7f800000u | (man << 13);
    std::memcpy(&f, &u, 4);
  } else if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -24);
    if (sign) f = -f;
  } else {
    const std::uint32_t u = sign | ((exp + 112u) << 23) | (man << 13);
    std::memcpy(&f, &u, 4);
  }
  return f;
}

namespace {

void round_all(float* x, std::size_t n, DType d) {
  if (d == DType::F32) return;
  for (std::size_t i = 0; i < n; ++i) x[i] = round_to_storage(x[i], d);
}

void softmax_rows(float* x, std::size_t rows, int n) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = x + r * static_cast<std::size_t>(n);
    const float m = *std::max_element(row, row + n);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - m));
    for (int j = 0; j < n; ++j) row[j] /= sum;
  }
}

}  // namespace

std::vector<std::vector<float>> run_plan_host(const Plan& plan, const float* input, int batch, DType round_to) {
  const std::size_t nb = static_cast<std::size_t>(batch);
  std::vector<std::vector<float>> buffers(plan.buffer_size.size());
  for (std::size_t b = 0; b < buffers.size(); ++b) buffers[b].assign(plan.buffer_size[b] * nb, std::nanf(""));
  const std::size_t in_size = plan.slot_size[static_cast<std::size_t>(plan.input_slot)];
  std::vector<float> in(input, input + in_size * nb);
  round_all(in.data(), in.size(), round_to);  // the GPU converts the input to its storage type
  auto value = [&](int slot) -> float* {
    if (slot == plan.input_slot) return in.data();
    const int b = plan.slot_buffer[static_cast<std::size_t>(slot)];
    if (b < 0) throw Error("run_plan_host: slot " + std::to_string(slot) + " has no buffer");
    return buffers[static_cast<std::size_t>(b)].data();
  };
  std::vector<float> scratch;

  for (const Op& op : plan.ops) {
    const ActParams act = act_params(op.act);
    float* y = value(op.out);
    const std::size_t out_per = plan.slot_size[static_cast<std::size_t>(op.out)];
    switch (op.type) {
      case OpType::Conv: {
        const float* x = value(op.in[0]);
        // cuDNN convs read weights in the storage type and store their sum in it before the
        // epilogue; the own depthwise kernel keeps float32 weights and rounds once at the end.
        const DType conv_round = op.depthwise_kernel ? DType::F32 : round_to;
        std::vector<float> w = op.weights;
        round_all(w.data(), w.size(), conv_round);
        int h = op.h, wd = op.w, pt = op.pad_top, pl = op.pad_left;
        const std::size_t imgs = nb * static_cast<std::size_t>(op.rows);
        if (op.explicit_pad) {  // like the GPU: copy into a zero-padded scratch, then no padding
          const int ph = op.padded_h(), pw = op.padded_w();
          scratch.assign(imgs * ph * pw * op.c, 0.0f);
          for (std::size_t i = 0; i < imgs; ++i)
            for (int yy = 0; yy < h; ++yy)
              std::memcpy(&scratch[((i * ph + yy + op.pad_top) * pw + op.pad_left) * op.c],
                          x + ((i * h + yy) * wd) * op.c, sizeof(float) * static_cast<std::size_t>(wd) * op.c);
          x = scratch.data();
          h = ph, wd = pw, pt = 0, pl = 0;
        }
        const int cg = op.c / op.groups, og = op.oc / op.groups;
        std::vector<float> res;
        const float* z = op.residual >= 0 ? value(op.residual) : nullptr;
        for (std::size_t i = 0; i < imgs; ++i)
          for (int oy = 0; oy < op.oh; ++oy)
            for (int ox = 0; ox < op.ow; ++ox)
              for (int o = 0; o < op.oc; ++o) {
                const int g = o / og;
                float acc = 0.0f;
                for (int ky = 0; ky < op.kh; ++ky) {
                  const int iy = oy * op.sh - pt + ky * op.dh;
                  if (iy < 0 || iy >= h) continue;
                  for (int kx = 0; kx < op.kw; ++kx) {
                    const int ix = ox * op.sw - pl + kx * op.dw;
                    if (ix < 0 || ix >= wd) continue;
                    const float* xs = x + ((i * h + iy) * wd + ix) * op.c + static_cast<std::size_t>(g) * cg;
                    const float* ws = w.data() + ((static_cast<std::size_t>(o) * op.kh + ky) * op.kw + kx) * cg;
                    for (int ci = 0; ci < cg; ++ci) acc += xs[ci] * ws[ci];
                  }
                }
                // cuDNN stores the convolution in the storage type; the epilogue reads it back.
                acc = round_to_storage(acc, conv_round);
                const std::size_t e = ((i * op.oh + oy) * op.ow + ox) * op.oc + o;
                if (!op.bias.empty()) acc += op.bias[static_cast<std::size_t>(o)];
                if (z) acc += op.residual_scale * z[e];
                y[e] = round_to_storage(apply_act(acc, act), round_to);
              }
        break;
      }
      case OpType::Pad: {
        const float* x = value(op.in[0]);
        std::fill(y, y + out_per * nb, 0.0f);
        for (std::size_t i = 0; i < nb; ++i)
          for (int yy = 0; yy < op.h; ++yy)
            std::memcpy(y + ((i * op.oh + yy + op.pad_top) * op.ow + op.pad_left) * op.c,
                        x + ((i * op.h + yy) * op.w) * op.c, sizeof(float) * static_cast<std::size_t>(op.w) * op.c);
        break;
      }
      case OpType::Affine: {
        const float* x = value(op.in[0]);
        const float* z = op.in.size() > 1 ? value(op.in[1]) : nullptr;
        const std::size_t total = out_per * nb;
        for (std::size_t e = 0; e < total; ++e) {
          const std::size_t c = e % static_cast<std::size_t>(op.c);
          float v = x[e];
          if (!op.scale.empty()) v = v * op.scale[c];
          if (!op.bias.empty()) v = v + op.bias[c];
          if (z) v = v + op.residual_scale * z[e];
          y[e] = round_to_storage(apply_act(v, act), round_to);
        }
        break;
      }
      case OpType::Concat: {
        const std::size_t rows = static_cast<std::size_t>(op.rows) * nb;
        std::size_t off = 0;
        for (std::size_t k = 0; k < op.in.size(); ++k) {
          const float* x = value(op.in[k]);
          const std::size_t ck = static_cast<std::size_t>(op.in_channels[k]);
          for (std::size_t r = 0; r < rows; ++r) std::memcpy(y + r * op.oc + off, x + r * ck, ck * sizeof(float));
          off += ck;
        }
        break;
      }
      case OpType::MaxPool:
      case OpType::AvgPool: {
        const float* x = value(op.in[0]);
        const bool is_max = op.type == OpType::MaxPool;
        for (std::size_t i = 0; i < nb; ++i)
          for (int oy = 0; oy < op.oh; ++oy)
            for (int ox = 0; ox < op.ow; ++ox)
              for (int c = 0; c < op.c; ++c) {
                float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
                int count = 0;
                for (int ky = 0; ky < op.kh; ++ky) {
                  const int iy = oy * op.sh - op.pad_top + ky;
                  if (iy < 0 || iy >= op.h) continue;
                  for (int kx = 0; kx < op.kw; ++kx) {
                    const int ix = ox * op.sw - op.pad_left + kx;
                    if (ix < 0 || ix >= op.w) continue;
                    const float v = x[((i * op.h + iy) * op.w + ix) * op.c + c];
                    acc = is_max ? std::max(acc, v) : acc + v;
                    ++count;
                  }
                }
                if (!is_max && count > 0) acc /= static_cast<float>(count);
                y[((i * op.oh + oy) * op.ow + ox) * op.c + c] = round_to_storage(acc, round_to);
              }
        break;
      }
      case OpType::Gap: {
        const float* x = value(op.in[0]);
        const std::size_t hw = static_cast<std::size_t>(op.h) * op.w;
        for (std::size_t i = 0; i < nb; ++i)
          for (int c = 0; c < op.c; ++c) {
            float acc = 0.0f;
            for (std::size_t p = 0; p < hw; ++p) acc += x[(i * hw + p) * op.c + c];
            y[i * op.c + c] = round_to_storage(apply_act(acc / static_cast<float>(hw), act), round_to);
          }
        break;
      }
    }
    if (op.act.kind == ActKind::Softmax) {
      softmax_rows(y, out_per * nb / static_cast<std::size_t>(op.oc), op.oc);
      round_all(y, out_per * nb, round_to);
    }
  }

  std::vector<std::vector<float>> outs;
  for (int s : plan.outputs) {
    const float* v = value(s);
    outs.emplace_back(v, v + plan.slot_size[static_cast<std::size_t>(s)] * nb);
  }
  return outs;
}

}  // namespace stoker::trainer::cudnn
