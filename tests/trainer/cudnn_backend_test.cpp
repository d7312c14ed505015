// The cuDNN backend against the CPU backend.
//
// Host tests (run everywhere): the plan that the GPU executes (lowering, TensorFlow padding
// decisions, BatchNormalization folding, fusion, buffer assignment) is run by the host executor of
// the plan (run_plan_host) in float32 — it must match the CPU backend to float rounding — and with
// fp16/bf16 rounding of every stored value and weight, which is the GPU's precision (< 1e-2
// relative; Darknet's top-1 within ±0.01 of the reference). Construction without a GPU fails clearly.
// GPU tests (skip without a device): every layer kind, the asymmetric padding, Darknet top-1,
// MobileNetV2 features, device input, two streams, and no device-memory growth.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include <stoker/core/cuda.hpp>
#include <stoker/core/error.hpp>
#include <stoker/core/half.hpp>
#include <stoker/trainer/cudnn_backend.hpp>
#include <stoker/trainer/model.hpp>

#if defined(STOKER_HAVE_CUDNN)
#include "cuda/conv.hpp"
#endif
#include "graph/lowering.hpp"
#include "import/import.hpp"
#include "op_cases.hpp"
#include "ops/forward_math.hpp"
#include "plan/plan.hpp"
#include "test_support.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

using test::max_rel_error;
using namespace op_cases;

// ---- host: the plan -------------------------------------------------------------------------------

// Shapes Reshape and Multiply cannot take: InvalidArgument naming the layer.
TEST(Lowering, ReshapeAndMultiplyRefuseOtherShapesNamingTheLayer) {
  auto expect_refused = [](const std::vector<int>& in, LayerNode n, const std::vector<int>& other) {
    Builder b(in);
    n.name = "the_layer";
    std::vector<int> inputs = {0};
    if (!other.empty()) {
      LayerNode rs = simple(LayerKind::Reshape);
      rs.name = "other";
      rs.target_shape = other;
      inputs.push_back(b.add(rs, {0}));
    }
    try {
      b.add(n, inputs);
      b.done({static_cast<int>(inputs.size())});
      FAIL() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("the_layer"), std::string::npos) << e.what();
    }
  };
  LayerNode rs = simple(LayerKind::Reshape);
  rs.target_shape = {5, -1};  // 4 × 4 × 3 = 48 values: not a multiple of 5
  expect_refused({4, 4, 3}, rs, {});
  rs.target_shape = {-1, -1};
  expect_refused({4, 4, 3}, rs, {});
  rs.target_shape = {4, 4, 4};
  expect_refused({4, 4, 3}, rs, {});
  expect_refused({4, 4, 3}, simple(LayerKind::Multiply), {4, 12});     // not the same shape
  expect_refused({4, 4, 3}, simple(LayerKind::Multiply), {1, 4, 12});  // not [1, 1, C]
  expect_refused({4, 4, 3}, simple(LayerKind::Multiply), {48});
}

TEST(CudnnPlan, TensorFlowPaddingDecisions) {
  auto only_conv = [](const cudnn::Plan& p) -> const cudnn::Op& {
    for (const auto& op : p.ops)
      if (op.type == cudnn::OpType::Conv) return op;
    throw Error("no conv");
  };
  {  // 'same', stride 2, even: total 1 → (0, 1): cuDNN cannot pad that, so explicitly
    Builder b({224, 224, 3});
    Graph g = b.done({b.add(conv(8, 3, 2, Padding::Same), {0})});
    const cudnn::Plan plan = cudnn::lower_graph(g);  // keep the plan alive: op refers into it
    const auto& op = only_conv(plan);
    EXPECT_EQ(op.oh, 112);
    EXPECT_EQ(op.pad_top, 0);
    EXPECT_EQ(op.pad_bottom, 1);
    EXPECT_EQ(op.pad_left, 0);
    EXPECT_EQ(op.pad_right, 1);
    EXPECT_TRUE(op.explicit_pad);
    EXPECT_EQ(op.padded_h(), 225);
  }
  {  // odd: total 2 → (1, 1): cuDNN's own symmetric padding
    Builder b({225, 225, 3});
    Graph g = b.done({b.add(conv(8, 3, 2, Padding::Same), {0})});
    const cudnn::Plan plan = cudnn::lower_graph(g);  // keep the plan alive: op refers into it
    const auto& op = only_conv(plan);
    EXPECT_EQ(op.oh, 113);
    EXPECT_EQ(op.pad_top, 1);
    EXPECT_EQ(op.pad_bottom, 1);
    EXPECT_FALSE(op.explicit_pad);
  }
  {  // stride 1 'same' 3×3: symmetric
    Builder b({20, 20, 3});
    Graph g = b.done({b.add(conv(8, 3, 1, Padding::Same), {0})});
    const cudnn::Plan plan = cudnn::lower_graph(g);  // keep the plan alive: op refers into it
    const auto& op = only_conv(plan);
    EXPECT_EQ(op.pad_top, 1);
    EXPECT_EQ(op.pad_right, 1);
    EXPECT_FALSE(op.explicit_pad);
  }
  for (bool in_cudnn : {false, true}) {
    // Keras MobileNetV2: ZeroPadding2D(((0, 1), (0, 1))) + 'valid' stride-2 depthwise: folded into
    // the conv; the own depthwise kernel reads any padding in place, cuDNN's grouped conv needs the
    // explicit copy
    Builder b({112, 112, 16});
    int p = b.add(zero_pad(0, 1, 0, 1), {0});
    Graph g = b.done({b.add(depthwise(3, 2, Padding::Valid), {p})});
    cudnn::PlanOptions po;
    po.cudnn_depthwise = in_cudnn;
    const cudnn::Plan plan = cudnn::lower_graph(g, po);
    ASSERT_EQ(plan.ops.size(), 1u) << plan.describe();
    const auto& op = plan.ops[0];
    EXPECT_EQ(op.in[0], 0);
    EXPECT_EQ(op.h, 112);
    EXPECT_EQ(op.oh, 56);
    EXPECT_EQ(op.groups, 16);
    EXPECT_EQ(op.pad_top, 0);
    EXPECT_EQ(op.pad_bottom, 1);
    EXPECT_EQ(op.depthwise_kernel, !in_cudnn);
    EXPECT_EQ(op.explicit_pad, in_cudnn);
    EXPECT_EQ(plan.scratch_size, in_cudnn ? std::size_t{113} * 113 * 16 : 0u);
  }
  {  // symmetric ZeroPadding2D(3) + 7×7 'valid': folded into cuDNN's padding
    Builder b({32, 32, 3});
    int p = b.add(zero_pad(3, 3, 3, 3), {0});
    Graph g = b.done({b.add(conv(8, 7, 2, Padding::Valid), {p})});
    const cudnn::Plan plan = cudnn::lower_graph(g);
    ASSERT_EQ(plan.ops.size(), 1u);
    EXPECT_EQ(plan.ops[0].pad_top, 3);
    EXPECT_FALSE(plan.ops[0].explicit_pad);
    EXPECT_EQ(plan.ops[0].oh, 16);
  }
  {  // padding before a max pool is real data (zeros take part in the max): its own op
    Builder b({8, 8, 3});
    int p = b.add(zero_pad(1, 1, 1, 1), {0});
    Graph g = b.done({b.add(pool(LayerKind::MaxPooling2D, 2, 2, Padding::Valid), {p})});
    const cudnn::Plan plan = cudnn::lower_graph(g);
    ASSERT_EQ(plan.ops.size(), 2u);
    EXPECT_EQ(plan.ops[0].type, cudnn::OpType::Pad);
  }
  {  // max pool 'same' stride 2 on even sizes: (0, 1), the kernel handles the asymmetry itself
    Builder b({8, 8, 3});
    Graph g = b.done({b.add(pool(LayerKind::MaxPooling2D, 3, 2, Padding::Same), {0})});
    const cudnn::Plan plan = cudnn::lower_graph(g);
    EXPECT_EQ(plan.ops[0].pad_top, 0);
    EXPECT_EQ(plan.ops[0].pad_bottom, 1);
  }
}

TEST(CudnnPlan, FoldsBatchNormLikeTheCpuBackendAndUsesCudnnLayout) {
  Builder b({5, 5, 3});
  int c = b.add(conv(4, 3, 1, Padding::Same, true), {0});
  int bn = b.add(batch_norm(), {c});
  int r = b.add(activation(relu(6.0f)), {bn});
  Graph g = b.done({r});
  const cudnn::Plan plan = cudnn::lower_graph(g);
  ASSERT_EQ(plan.ops.size(), 1u) << plan.describe();
  const auto& op = plan.ops[0];
  EXPECT_EQ(op.act.max_value, 6.0f);
  const LayerNode& cn = g.nodes[static_cast<std::size_t>(c)];
  const LayerNode& bnn = g.nodes[static_cast<std::size_t>(bn)];
  const float* k = cn.weight("kernel")->ptr();
  const float* bias = cn.weight("bias")->ptr();
  for (int o = 0; o < 4; ++o) {
    const double s = double(bnn.weight("gamma")->ptr()[o]) /
                     std::sqrt(double(bnn.weight("moving_variance")->ptr()[o]) + double(bnn.epsilon));
    const double shift = double(bnn.weight("beta")->ptr()[o]) - double(bnn.weight("moving_mean")->ptr()[o]) * s;
    EXPECT_EQ(op.bias[static_cast<std::size_t>(o)], static_cast<float>(bias[o] * s + shift));
    for (int ky = 0; ky < 3; ++ky)
      for (int kx = 0; kx < 3; ++kx)
        for (int ci = 0; ci < 3; ++ci) {
          // Keras HWIO [ky][kx][ci][o] → cuDNN KRSC [o][ky][kx][ci], scaled in float like the CPU backend.
          const float keras = k[((ky * 3 + kx) * 3 + ci) * 4 + o];
          EXPECT_EQ(op.weights[static_cast<std::size_t>(((o * 3 + ky) * 3 + kx) * 3 + ci)],
                    static_cast<float>(keras * s));
        }
  }
  // The GPU stores the folded weights in half precision: round-to-nearest-even, as the host does.
  EXPECT_EQ(cudnn::round_to_storage(1.0f + 1.0f / 4096.0f, DType::F16), 1.0f);
  EXPECT_EQ(cudnn::round_to_storage(1.0f + 3.0f / 2048.0f, DType::F16), 1.0f + 2.0f / 1024.0f);
  EXPECT_EQ(cudnn::round_to_storage(65520.0f, DType::F16), std::numeric_limits<float>::infinity());
  EXPECT_EQ(cudnn::round_to_storage(1.0f + 1.0f / 256.0f, DType::BF16), 1.0f);
  EXPECT_EQ(cudnn::round_to_storage(6e-8f, DType::F16), std::ldexp(1.0f, -24));
}

TEST(CudnnPlan, FusesResidualAddAndActivationOnlyWhenSafe) {
  {  // conv → BN → Add(·, input) → ReLU: one conv op with the input as residual and the ReLU
    Builder b({6, 6, 4});
    int c = b.add(conv(4, 3, 1, Padding::Same, false), {0});
    int bn = b.add(batch_norm(), {c});
    int a = b.add(simple(LayerKind::Add), {bn, 0});
    int r = b.add(activation(relu()), {a});
    const cudnn::Plan plan = cudnn::lower_graph(b.done({r}));
    ASSERT_EQ(plan.ops.size(), 1u) << plan.describe();
    EXPECT_EQ(plan.ops[0].residual, 0);
    EXPECT_EQ(plan.ops[0].act.kind, ActKind::ReLU);
  }
  {  // the conv's value is also a graph output: nothing may be fused into it
    Builder b({6, 6, 4});
    int c = b.add(conv(4, 3, 1, Padding::Same, false), {0});
    int a = b.add(simple(LayerKind::Add), {c, 0});
    int r = b.add(activation(relu()), {a});
    const cudnn::Plan plan = cudnn::lower_graph(b.done({r, c}));
    ASSERT_EQ(plan.ops.size(), 2u) << plan.describe();
    EXPECT_EQ(plan.ops[0].residual, -1);
    EXPECT_TRUE(plan.ops[0].act.is_linear());
    EXPECT_EQ(plan.ops[1].type, cudnn::OpType::Affine);
    EXPECT_EQ(plan.ops[1].act.kind, ActKind::ReLU);
  }
  {  // Add([a, b]) with a's conv first in the graph (ResNet's shortcut): fused into b's conv, which
     // runs after a and reads it; never into a's, which would read b before it is computed
    Builder b({6, 6, 4});
    int a = b.add(conv(4, 1, 1, Padding::Valid, true), {0});
    int c = b.add(conv(4, 3, 1, Padding::Same, true), {0});
    int add = b.add(simple(LayerKind::Add), {a, c});
    int r = b.add(activation(relu()), {add});
    const cudnn::Plan plan = cudnn::lower_graph(b.done({r}));
    ASSERT_EQ(plan.ops.size(), 2u) << plan.describe();
    EXPECT_EQ(plan.ops[0].residual, -1) << plan.describe();
    EXPECT_EQ(plan.ops[1].residual, plan.ops[0].out) << plan.describe();
    EXPECT_EQ(plan.ops[1].act.kind, ActKind::ReLU);
  }
  {  // an activation is not folded through BatchNormalization: BN after ReLU stays separate
    Builder b({6, 6, 4});
    int c = b.add(conv(4, 3, 1, Padding::Same, true, relu()), {0});
    int bn = b.add(batch_norm(), {c});
    const cudnn::Plan plan = cudnn::lower_graph(b.done({bn}));
    ASSERT_EQ(plan.ops.size(), 2u) << plan.describe();
  }
}

TEST(Lowering, BackendsDifferOnlyInWhatTheirKernelsCanFuse) {
  // ZeroPadding2D → conv → BN → Add(·, input) → ReLU. Both backends fold the BN into the conv (the
  // same weights) and fuse the ReLU; only the cuDNN plan's kernels also take the padding into the
  // conv and the Add into its epilogue.
  Builder b({8, 8, 4});
  int p = b.add(zero_pad(1, 1, 1, 1), {0});
  int c = b.add(conv(4, 3, 1, Padding::Valid, false), {p});
  int bn = b.add(batch_norm(), {c});
  int a = b.add(simple(LayerKind::Add), {bn, 0});
  const Graph g = b.done({b.add(activation(relu()), {a})});
  auto kinds = [](const detail::LoweredGraph& lowered) {
    std::vector<detail::OpKind> k;
    for (const auto& op : lowered.ops) k.push_back(op.kind);
    return k;
  };
  using detail::OpKind;
  detail::LoweringOptions cpu;
  cpu.backend = "cpu backend";
  const detail::LoweredGraph on_cpu = detail::lower(g, cpu);
  ASSERT_EQ(kinds(on_cpu), (std::vector{OpKind::ZeroPad, OpKind::Conv, OpKind::Add}));
  EXPECT_EQ(on_cpu.ops[2].act.kind, ActKind::ReLU);
  detail::LoweringOptions gpu = cpu;
  gpu.fuse_residual_add = gpu.fold_zero_padding = true;
  const detail::LoweredGraph on_gpu = detail::lower(g, gpu);
  ASSERT_EQ(kinds(on_gpu), (std::vector{OpKind::Conv}));
  const detail::LoweredOp& fused = on_gpu.ops[0];
  EXPECT_EQ(fused.in, std::vector<int>{0});
  EXPECT_EQ(fused.h, 8);
  EXPECT_EQ(fused.pad_top + fused.pad_bottom + fused.pad_left + fused.pad_right, 4);
  EXPECT_EQ(fused.residual, 0);
  EXPECT_EQ(fused.act.kind, ActKind::ReLU);
  EXPECT_EQ(fused.weights, on_cpu.ops[1].weights);
  EXPECT_EQ(fused.bias, on_cpu.ops[1].bias);
  const cudnn::Plan plan = cudnn::lower_graph(g);  // the cuDNN plan runs exactly that op
  ASSERT_EQ(plan.ops.size(), 1u) << plan.describe();
  EXPECT_EQ(plan.ops[0].kind, OpKind::Conv);
  EXPECT_EQ(plan.ops[0].residual, 0);
}

TEST(CudnnPlan, BuffersAreReusedAndNeverOverwriteLiveValues) {
  // A long chain needs two buffers; the residual test graph's values stay correct (the host
  // executor runs on the assigned buffers, poisoned with NaN, and matched the CPU above).
  Builder b({8, 8, 4});
  int x = 0;
  for (int i = 0; i < 10; ++i) x = b.add(conv(4, 3, 1, Padding::Same, true, relu(6.0f)), {x});
  const cudnn::Plan plan = cudnn::lower_graph(b.done({x}));
  EXPECT_EQ(plan.buffer_size.size(), 2u) << plan.describe();
  for (const auto& op : plan.ops)
    for (int in : op.in)
      if (in != plan.input_slot) {
        EXPECT_NE(plan.slot_buffer[static_cast<std::size_t>(in)], plan.slot_buffer[static_cast<std::size_t>(op.out)]);
      }
}

TEST(CudnnPlan, KernelMathIsTheSameWith32And64BitIndices) {
  // The GPU kernels index in 32 bits when an op fits; the host executor (tested above) in 64.
  std::vector<float> x(2 * 9 * 7 * 6);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  auto load = [&](std::size_t i) { return x.at(i); };
  std::vector<float> wt(3 * 3 * 12);
  for (std::size_t i = 0; i < wt.size(); ++i) wt[i] = std::cos(0.11f * static_cast<float>(i));
  const ops::DepthwiseGeometry dg{9, 7, 6, 5, 4, 12, 3, 3, 2, 2, 1, 1, 0, 1, 2};  // 'same' stride 2, multiplier 2
  for (std::uint32_t e = 0; e < 2u * 5 * 4 * 12; ++e)
    ASSERT_EQ(ops::depthwise_sum(load, wt.data(), dg, e), ops::depthwise_sum(load, wt.data(), dg, std::size_t{e}));
  const ops::PoolGeometry pg{9, 7, 6, 5, 4, 3, 3, 2, 2, 1, 1};
  for (std::uint32_t e = 0; e < 2u * 5 * 4 * 6; ++e)
    for (bool mx : {true, false})
      ASSERT_EQ(ops::pool_value(load, pg, mx, e), ops::pool_value(load, pg, mx, std::size_t{e}));
  const ops::PadGeometry zg{9, 7, 6, 12, 8, 1, 0};
  for (std::uint32_t e = 0; e < 2u * 12 * 8 * 6; ++e) {
    std::uint32_t a = 0;
    std::size_t b = 0;
    ASSERT_EQ(ops::pad_source(zg, e, &a), ops::pad_source(zg, std::size_t{e}, &b));
    ASSERT_EQ(std::size_t{a}, b);
  }
  for (std::uint32_t e = 0; e < 2u * 6; ++e)
    ASSERT_EQ(ops::gap_value(load, 63, 6, e), ops::gap_value(load, 63, 6, std::size_t{e}));
  for (std::uint32_t e = 0; e < 100; ++e)
    ASSERT_EQ(std::size_t{ops::concat_destination(e, 5, 11, 3)}, ops::concat_destination(std::size_t{e}, 5, 11, 3));
  for (std::uint32_t e = 0; e < 2u * 6; ++e)
    ASSERT_EQ(ops::gmp_value(load, 63, 6, e), ops::gmp_value(load, 63, 6, std::size_t{e}));
  for (std::uint32_t e = 0; e < 2u * 9 * 7 * 6; ++e)
    for (bool broadcast : {true, false})
      ASSERT_EQ(std::size_t{ops::mul_source(e, 9u * 7 * 6, 6, broadcast)},
                ops::mul_source(std::size_t{e}, std::size_t{9 * 7 * 6}, 6, broadcast));
  for (std::uint32_t row = 0; row < 2u * 9 * 7; ++row) {
    const ops::RowStats a = ops::layer_norm_stats(load, row * 6u, 6, 1e-3f);
    const ops::RowStats b = ops::layer_norm_stats(load, std::size_t{row} * 6, 6, 1e-3f);
    ASSERT_EQ(a.mean, b.mean);
    ASSERT_EQ(a.rstd, b.rstd);
  }
}

TEST(CudnnPlan, RejectsWhatItCannotRun) {
  Builder b({4, 4, 3});
  Graph g = b.done({0});
  g.inputs = {0, 0};
  EXPECT_THROW(cudnn::lower_graph(g), InvalidArgument);
  Builder ok({4, 4, 3});
  Graph g2 = ok.done({ok.add(conv(2, 1, 1, Padding::Valid), {0})});
  CudnnBackendOptions o;
  o.max_batch = 0;
  EXPECT_THROW(make_cudnn_backend(g2, o), InvalidArgument);
  o.max_batch = 4;
  o.storage = DType::F32;
  EXPECT_THROW(make_cudnn_backend(g2, o), InvalidArgument);
}

TEST(CudnnBackend, ConstructionWithoutGpuFailsClearly) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  Builder b({4, 4, 3});
  Graph g = b.done({b.add(conv(2, 1, 1, Padding::Valid), {0})});
  try {
    make_cudnn_backend(g);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    std::printf("without a GPU: %s\n", what.c_str());
    EXPECT_NE(what.find("cudnn backend"), std::string::npos) << what;
    EXPECT_TRUE(what.find("CUDA") != std::string::npos || what.find("GPU") != std::string::npos ||
                what.find("cuDNN") != std::string::npos || what.find("driver") != std::string::npos)
        << what;
  }
}

// ---- the shared real models --------------------------------------------------------------------------

std::filesystem::path shared_or_empty() {
  auto d = test::shared_data_dir();
  return d ? *d : std::filesystem::path();
}
#define REQUIRE_SHARED(dir)                                              \
  const auto dir = shared_or_empty();                                    \
  if (dir.empty()) {                                                     \
    GTEST_SKIP() << "shared data (../shared/data) not present; skipped"; \
  }

std::vector<float> read_rgb(const std::filesystem::path& p, float scale, float offset) {
  std::ifstream in(p, std::ios::binary);
  std::vector<unsigned char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> x;
  for (auto v : raw) x.push_back(static_cast<float>(v) * scale + offset);
  return x;
}

struct DarknetCase {
  const char* file;
  int top1;
  float prob;
};
constexpr DarknetCase kDarknet[] = {{"bird.rgb", 394, 0.924f}, {"sunflower.rgb", 356, 0.33f}};

std::vector<float> darknet_input(const std::filesystem::path& shared) {
  std::vector<float> x;
  for (const auto& c : kDarknet) {
    auto v = read_rgb(shared / "images" / c.file, 1.0f / 255.0f, 0.0f);
    EXPECT_EQ(v.size(), 224u * 224 * 3) << c.file;
    x.insert(x.end(), v.begin(), v.end());
  }
  return x;
}

void expect_darknet_top1(const std::vector<float>& logits, const char* who) {
  for (int i = 0; i < 2; ++i) {
    const float* z = logits.data() + static_cast<std::size_t>(i) * 1000;
    const float m = *std::max_element(z, z + 1000);
    double sum = 0;
    for (int j = 0; j < 1000; ++j) sum += std::exp(double(z[j]) - m);
    const int top = static_cast<int>(std::max_element(z, z + 1000) - z);
    const double p = 1.0 / sum;
    std::printf("%s darknet %s: top-1 %d p=%.4f (reference %d %.3f)\n", who, kDarknet[i].file, top, p, kDarknet[i].top1,
                kDarknet[i].prob);
    EXPECT_EQ(top, kDarknet[i].top1) << who << " " << kDarknet[i].file;
    EXPECT_NEAR(p, kDarknet[i].prob, 0.01) << who << " " << kDarknet[i].file;
  }
}

TEST(CudnnPlan, DarknetTinyTop1InHalfPrecisionOnTheHost) {
  REQUIRE_SHARED(shared);
  Model model = load_model(shared / "models" / "tfjs" / "darknet_tiny_imagenet" / "model.json");
  const auto x = darknet_input(shared);
  const cudnn::Plan plan = cudnn::lower_graph(model.graph());
  for (DType d : {DType::F16, DType::BF16}) {
    auto out = cudnn::run_plan_host(plan, x.data(), 2, d);
    expect_darknet_top1(out[0], d == DType::F16 ? "host plan f16" : "host plan bf16");
  }
}

Model mobilenet_backbone(const std::filesystem::path& shared) {
  return load_model(shared / "models" / "keras" / "mobilenet_v2_0.35_224_3class.h5").cut_at("sequential_9");
}

std::vector<float> mobilenet_input(const std::filesystem::path& shared) {
  std::vector<float> x;
  for (const char* f : {"bird.rgb", "sunflower.rgb"}) {
    auto v = read_rgb(shared / "images" / f, 1.0f / 127.5f, -1.0f);
    x.insert(x.end(), v.begin(), v.end());
  }
  return x;
}

TEST(CudnnPlan, MobileNetV2FeaturesInHalfPrecisionOnTheHost) {
  REQUIRE_SHARED(shared);
  Model backbone = mobilenet_backbone(shared);
  const auto x = mobilenet_input(shared);
  Tensor cpu = backbone.forward(x.data(), 2);
  const cudnn::Plan plan = cudnn::lower_graph(backbone.graph());
  std::size_t explicit_pads = 0, residuals = 0;
  for (const auto& op : plan.ops) explicit_pads += op.explicit_pad, residuals += op.residual >= 0;
  std::printf(
      "mobilenet plan: %zu ops (graph %zu nodes), %zu buffers (%zu values per sample), %zu explicit pads, "
      "%zu fused residual adds\n",
      plan.ops.size(), backbone.graph().nodes.size(), plan.buffer_size.size(), plan.activation_values(), explicit_pads,
      residuals);
  EXPECT_EQ(residuals, 10u);     // MobileNetV2's ten block_N_add
  EXPECT_EQ(explicit_pads, 1u);  // Conv1, 'same' stride 2 on 224 (the depthwise kernel pads in place)
  EXPECT_LE(plan.buffer_size.size(), 5u);
  for (DType d : {DType::F32, DType::F16, DType::BF16}) {
    auto out = cudnn::run_plan_host(plan, x.data(), 2, d);
    const double e = max_rel_error(out[0], cpu.data);
    std::printf("mobilenet host plan %s vs cpu backend: %.3g\n", to_string(d), e);
    EXPECT_LT(e, d == DType::F32 ? 1e-5 : (d == DType::F16 ? 1e-2 : 5e-2));
  }
  // Depthwise convs through cuDNN's grouped conv (weights in fp16): the folded depthwise weights
  // are ill-conditioned, which is why the own kernel with float32 weights is the default.
  cudnn::PlanOptions po;
  po.cudnn_depthwise = true;
  const cudnn::Plan grouped = cudnn::lower_graph(backbone.graph(), po);
  const double eg = max_rel_error(cudnn::run_plan_host(grouped, x.data(), 2, DType::F16)[0], cpu.data);
  std::printf("mobilenet host plan float16, depthwise as cuDNN grouped convs: %.3g\n", eg);
  EXPECT_LT(eg, 2e-2);
}

// The model: Keras Applications' InceptionResNetV2 (include_top=False, pooling='avg'),
// from its committed topology (scripts/keras_topology_inception_resnet_v2.py) at size×size with
// random weights (the ImageNet ones are 215 MB). 781 layers: ScaledAdd residuals, Concatenate,
// 'valid' stride-2 convs and pools, 1×n / n×1 kernels.
Graph inception_resnet_v2(int size) {
  std::ifstream in(test::vectors_dir() / "inception_resnet_v2" / "model_config.json");
  const auto config = nlohmann::json::parse(in);
  LoadOptions lo;
  lo.input_hw = {size, size};
  Graph g = detail::parse_keras_topology(config, lo);
  std::mt19937 rng(2024);
  for (LayerNode& n : g.nodes) {
    if (n.kind == LayerKind::Input) continue;
    std::vector<std::vector<int>> ins;
    for (int i : n.inputs) ins.push_back(g.nodes[static_cast<std::size_t>(i)].out_shape);
    n.out_shape = detail::infer_shape(n, ins);
    randomise_weights(n, ins.at(0).back(), rng);
  }
  infer_shapes_and_check(g);
  return g;
}

TEST(CudnnPlan, InceptionResNetV2OnTheHost) {
  // At 75×75 (Keras' smallest size for it) to keep the plain-loop host executor quick.
  const Graph g = inception_resnet_v2(75);
  EXPECT_EQ(g.nodes.size(), 781u);
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(g.outputs.at(0))].out_shape, std::vector<int>{1536});
  const auto x = random_input(g, 1, 5);
  const auto cpu = make_cpu_backend(g)->forward(x.data(), 1);
  // Random weights must still give features worth comparing (pooled ReLU outputs: finite, many
  // non-zero, not tiny).
  const auto& f = cpu[0].data;
  const auto nonzero = std::count_if(f.begin(), f.end(), [](float v) { return v != 0.0f; });
  const float hi = *std::max_element(f.begin(), f.end());
  std::printf("inception_resnet_v2 features: %td of %zu non-zero, largest %g\n", nonzero, f.size(), hi);
  EXPECT_GT(nonzero, static_cast<std::ptrdiff_t>(f.size() / 4));
  EXPECT_TRUE(std::isfinite(hi) && hi > 0.1f) << hi;
  const cudnn::Plan plan = cudnn::lower_graph(g);
  std::size_t residuals = 0, explicit_pads = 0;
  for (const auto& op : plan.ops) residuals += op.residual >= 0, explicit_pads += op.explicit_pad;
  std::printf(
      "inception_resnet_v2 plan: %zu ops, %zu buffers (%zu values per sample), %zu fused residual adds, "
      "%zu explicit pads\n",
      plan.ops.size(), plan.buffer_size.size(), plan.activation_values(), residuals, explicit_pads);
  for (DType d : {DType::F32, DType::F16}) {
    const double e = max_rel_error(cudnn::run_plan_host(plan, x.data(), 1, d)[0], cpu[0].data);
    std::printf("inception_resnet_v2 host plan %s vs cpu backend: %.3g\n", to_string(d), e);
    EXPECT_LT(e, d == DType::F32 ? 1e-5 : 1e-2);
  }
}

// Keras Applications' EfficientNet builder, shrunk (tests/trainer/vectors/layers/efficientnet_tiny,
// scripts/keras_reference_layers.py): the plan on the host against Keras' own outputs.
TEST(CudnnPlan, EfficientNetTinyMatchesKerasOnTheHost) {
  const auto dir = test::vectors_dir() / "layers";
  const Model model = load_model(dir / "efficientnet_tiny.h5");
  test::VectorFile ref(dir / "efficientnet_tiny.json");
  const Tensor x = ref.tensor(ref.meta.at("input"));
  for (const auto& [layer, entry] : ref.meta.at("outputs").items()) {
    SCOPED_TRACE("layer " + layer);
    const cudnn::Plan plan = cudnn::lower_graph(model.cut_at(layer).graph());
    const Tensor expected = ref.tensor(entry);
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      const double e = max_rel_error(cudnn::run_plan_host(plan, x.data.data(), x.batch(), d)[0], expected.data);
      std::printf("efficientnet_tiny %-20s host plan %s vs Keras: %.3g\n", layer.c_str(), to_string(d), e);
      EXPECT_LT(e, d == DType::F32 ? 1e-5 : d == DType::F16 ? 1e-2 : 5e-2);
    }
  }
}

// ---- GPU ------------------------------------------------------------------------------------------------

#define REQUIRE_GPU()                                                \
  if (!built_with_cudnn()) {                                         \
    GTEST_SKIP() << "stoker was built without the cuDNN backend";    \
  }                                                                  \
  if (cuda_device_count() == 0) {                                    \
    GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason(); \
  }

TEST(CudnnBackend, BuiltWithoutCudnnFailsClearly) {
  if (built_with_cudnn()) GTEST_SKIP() << "built with cuDNN";
  Builder b({4, 4, 3});
  Graph g = b.done({b.add(conv(2, 1, 1, Padding::Valid), {0})});
  EXPECT_THROW(make_cudnn_backend(g), CudaError);
}

TEST(CudnnBackend, EveryLayerKindMatchesCpuBackend) {
  REQUIRE_GPU();
  struct Variant {
    const char* name;
    DType storage;
    bool fuse;             // folding and fusion (off: every layer its own op)
    bool cudnn_depthwise;  // depthwise as cuDNN grouped convs
  } variants[] = {{"f16", DType::F16, true, false},
                  {"bf16", DType::BF16, true, false},
                  {"f16 unfused", DType::F16, false, false},
                  {"f16 cudnn-depthwise", DType::F16, true, true}};
  for (const auto& [name, g] : layer_cases()) {
    for (const Variant& v : variants) {
      const DType st = v.storage;
      SCOPED_TRACE(name + " " + v.name);
      const int batch = 3;
      auto x = random_input(g, batch, 11);
      auto cpu = make_cpu_backend(g)->forward(x.data(), batch);
      CudnnBackendOptions o;
      o.max_batch = 4;
      o.storage = st;
      o.fold_batch_norm = o.fuse_activations = o.fuse_residual_add = v.fuse;
      o.cudnn_depthwise = v.cudnn_depthwise;
      auto gpu = make_cudnn_backend(g, o);
      auto out = gpu->forward(x.data(), batch);
      // Whether cuDNN took the fused conv + bias + ReLU (+ z) path shows in the plan's description.
      if (name == "conv_relu" || name == "add_shortcut_first") std::printf("%s", gpu->describe().c_str());
      ASSERT_EQ(out.size(), cpu.size());
      for (std::size_t k = 0; k < cpu.size(); ++k) {
        ASSERT_EQ(out[k].shape, cpu[k].shape);
        const double e = max_rel_error(out[k].data, cpu[k].data);
        std::printf("gpu %-28s %s output %zu: %.3g\n", name.c_str(), v.name, k, e);
        if (!discontinuous(name)) {
          EXPECT_LT(e, st == DType::F16 ? 1e-2 : 5e-2) << gpu->describe();
        }
      }
    }
  }
}

// On the emulated device the backend is the real class, not a stand-in: its construction (cuDNN
// handle, buffers, the algorithm choice) reports its cold start, and every convolution runs through
// the cuDNN seam (cuda/emulated_conv.cpp) that replaces cuDNN there, at the batch sizes called.
TEST(CudnnBackend, TheEmulatedDeviceRunsTheRealBackend) {
  REQUIRE_GPU();
  if (!cuda_is_emulated()) GTEST_SKIP() << "a real GPU: the check runs cuDNN itself";
  Builder b({9, 9, 3});
  const int x = b.add(conv(8, 3, 2, Padding::Same, true, relu(6.0f)), {0});  // asymmetric: explicit padding
  Graph g = b.done({b.add(conv(4, 1, 1, Padding::Valid), {x})});
  CudnnBackendOptions o;
  o.max_batch = 4;
  auto gpu = make_cudnn_backend(g, o);
  const auto in = random_input(g, 3, 2);
  const auto out = gpu->forward(in.data(), 3);
  const std::string d = gpu->describe();
  EXPECT_NE(d.find("cold start: cudnnCreate"), std::string::npos) << d;
  EXPECT_NE(d.find("cudnn emulated (host loops), batches 3"), std::string::npos) << d;
  EXPECT_LT(max_rel_error(out[0].data, make_cpu_backend(g)->forward(in.data(), 3)[0].data), 1e-2);
}

TEST(CudnnBackend, AsymmetricSamePaddingStride2) {
  REQUIRE_GPU();
  for (int size : {224, 225, 16, 17}) {
    Builder b({size, size, 3});
    int c = b.add(conv(8, 3, 2, Padding::Same, true), {0});
    int d = b.add(depthwise(3, 2, Padding::Same, 1, true), {c});
    int p = b.add(zero_pad(0, 1, 0, 1), {d});
    int e = b.add(depthwise(3, 2, Padding::Valid), {p});
    Graph g = b.done({e});
    auto x = random_input(g, 2, 3);
    auto cpu = make_cpu_backend(g)->forward(x.data(), 2);
    CudnnBackendOptions o;
    o.max_batch = 2;
    auto out = make_cudnn_backend(g, o)->forward(x.data(), 2);
    const double err = max_rel_error(out[0].data, cpu[0].data);
    std::printf("gpu asymmetric padding %d: %.3g\n", size, err);
    EXPECT_LT(err, 1e-2) << size;
  }
}

TEST(CudnnBackend, DarknetTinyTop1MatchesReference) {
  REQUIRE_GPU();
  REQUIRE_SHARED(shared);
  Model model = load_model(shared / "models" / "tfjs" / "darknet_tiny_imagenet" / "model.json");
  const auto x = darknet_input(shared);
  for (DType st : {DType::F16, DType::BF16}) {
    CudnnBackendOptions o;
    o.max_batch = 8;
    o.storage = st;
    auto gpu = make_cudnn_backend(model.graph(), o);
    auto out = gpu->forward(x.data(), 2);
    expect_darknet_top1(out[0].data, st == DType::F16 ? "gpu f16" : "gpu bf16");
  }
}

TEST(CudnnBackend, MobileNetV2FeaturesMatchCpuBackend) {
  REQUIRE_GPU();
  REQUIRE_SHARED(shared);
  Model backbone = mobilenet_backbone(shared);
  const auto x = mobilenet_input(shared);
  Tensor cpu = backbone.forward(x.data(), 2);
  CudnnBackendOptions o;
  o.max_batch = 32;
  auto gpu = make_cudnn_backend(backbone.graph(), o);
  std::printf("%s", gpu->describe().c_str());
  auto out = gpu->forward(x.data(), 2);
  const double e = max_rel_error(out[0].data, cpu.data);
  std::printf("mobilenet gpu f16 vs cpu: %.3g\n", e);
  EXPECT_LT(e, 1e-2);
  // Through Model::set_backend, and with a device input in fp16 read in place.
  Model m = backbone;
  m.set_backend(gpu);
  EXPECT_LT(max_rel_error(m.forward(x.data(), 2).data, cpu.data), 1e-2);
  std::vector<std::uint16_t> half(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) half[i] = convert::f16_bits(x[i]);
  DeviceBuffer dx(half.size() * 2, "test input");
  Stream s;
  copy_to_device_async(dx.get(), half.data(), half.size() * 2, s.get());
  auto views = gpu->forward_device(dx.get(), DType::F16, 2, s.get());
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].shape, (std::vector<int>{2, 1280}));
  std::vector<float> back(2 * 1280);
  copy_to_host_async(back.data(), views[0].data, back.size() * sizeof(float), s.get());
  s.synchronize();
  EXPECT_LT(max_rel_error(back, cpu.data), 1e-2);
}

#if defined(STOKER_HAVE_CUDNN)
// What a GPU run reports first: the cuDNN the process loaded, and which small-channel convolutions
// it runs in NHWC bf16 and fp16 (a first convolution's 3 channels, squeeze-excitation 1x1s, small
// heads). cuDNN unable to work here at all (a sub-library missing, driver or runtime incompatible)
// fails; so does a configuration with channels in multiples of 8 that it cannot run.
TEST(CudnnEnvironment, ReportsVersionsAndSmallChannelSupport) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  std::printf("%s\n%s\n", cuda_device_description().c_str(), cudnn::gpu::cudnn_environment().c_str());
  cudnn::gpu::CudnnHandle handle;
  for (DType st : {DType::BF16, DType::F16}) {
    for (const std::string& line : cudnn::gpu::probe_small_channel_convolutions(handle, st)) {
      std::printf("%s %s\n", to_string(st), line.c_str());
      if (line.rfind("C 8, K 8:", 0) == 0 || line.rfind("C 16, K 16:", 0) == 0) {
        EXPECT_NE(line.find("forward ok"), std::string::npos) << line;
        EXPECT_NE(line.find("backward-data ok"), std::string::npos) << line;
        EXPECT_NE(line.find("backward-filter ok"), std::string::npos) << line;
      }
    }
  }
}

// One convolution's forward, backward-data and backward-filter results, in storage bits.
struct ConvResults {
  std::vector<std::uint16_t> y, dx, dw;
  bool padded = false;
  std::string described;
  std::size_t device_bytes = 0;  // the convolution's own buffers (the padded form's)
};

ConvResults run_conv(const cudnn::ConvGeometry& g, int images, const std::vector<std::uint16_t>& x,
                     const std::vector<std::uint16_t>& w, const std::vector<std::uint16_t>& dy) {
  Stream s;
  cudnn::gpu::CudnnHandle handle;
  handle.set_stream(s.get());
  cudnn::gpu::Conv conv(handle, "conv", g, images, false, std::size_t{1} << 20);
  const std::size_t workspace_bytes = conv.prepare_backward(handle, std::size_t{1} << 20);
  DeviceBuffer workspace(std::max<std::size_t>(workspace_bytes, 1), "test workspace");
  auto upload = [&](const std::vector<std::uint16_t>& v) {
    DeviceBuffer d(v.size() * 2, "test values");
    copy_to_device_async(d.get(), v.data(), d.bytes(), s.get());
    return d;
  };
  const DeviceBuffer dx_in = upload(x), dw_in = upload(w), ddy = upload(dy);
  DeviceBuffer y(dy.size() * 2, "test output"), dx(x.size() * 2, "test dx"), dw(w.size() * 2, "test dw");
  conv.run(handle, images, dx_in.get(), dw_in.get(), y.get(), nullptr, 0.0f, nullptr, workspace.get(),
           workspace.bytes());
  conv.backward_data(handle, images, ddy.get(), dw_in.get(), dx.get(), workspace.get(), workspace.bytes());
  conv.backward_filter(handle, images, dx_in.get(), ddy.get(), dw.get(), workspace.get(), workspace.bytes());
  ConvResults r{std::vector<std::uint16_t>(dy.size()),
                std::vector<std::uint16_t>(x.size()),
                std::vector<std::uint16_t>(w.size()),
                conv.channels_padded(),
                conv.describe(),
                conv.device_bytes()};
  copy_to_host_async(r.y.data(), y.get(), y.bytes(), s.get());
  copy_to_host_async(r.dx.data(), dx.get(), dx.bytes(), s.get());
  copy_to_host_async(r.dw.data(), dw.get(), dw.bytes(), s.get());
  s.synchronize();
  return r;
}

// cuDNN may offer no fp16/bf16 NHWC algorithm for channel counts that are not multiples of 8 (the
// probe above says which on a GPU). Then Conv runs the convolution on channels padded with zeros:
// forward, backward-data and backward-filter equal the unpadded convolution's bit for bit (the
// padded channels add exact zeros to float32 sums) — whether cuDNN refuses the whole convolution or
// only its backward calls. The emulated device's cuDNN stand-in refuses them when asked to.
TEST(CudnnConv, RunsOnChannelsPaddedTo8WhereCudnnRefusesTheirs) {
  REQUIRE_GPU();
  if (!cuda_is_emulated()) GTEST_SKIP() << "on a GPU cuDNN decides what it refuses (the probe reports it)";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto values = [&](std::size_t n) {
    std::vector<std::uint16_t> v(n);
    for (auto& b : v) b = convert::bf16_bits(normal(rng));
    return v;
  };
  // C 3 -> K 5 (both unaligned), C 8 -> K 3 (K alone), C 3 -> K 16 with stride 2 (C alone).
  for (const auto& [c, k, stride] : {std::tuple{3, 5, 1}, std::tuple{8, 3, 1}, std::tuple{3, 16, 2}}) {
    cudnn::ConvGeometry g;
    g.c = c, g.h = 7, g.w = 6, g.oc = k, g.kh = 3, g.kw = 3, g.pad_h = 1, g.pad_w = 1, g.sh = stride, g.sw = stride;
    g.oh = (7 + 2 - 3) / stride + 1, g.ow = (6 + 2 - 3) / stride + 1, g.storage = DType::BF16;
    const int images = 3;
    const auto x = values(std::size_t{images} * 7 * 6 * c), w = values(static_cast<std::size_t>(k) * 9 * c);
    const auto dy = values(std::size_t{images} * g.oh * g.ow * k);
    const ConvResults plain = run_conv(g, images, x, w, dy);
    EXPECT_FALSE(plain.padded);
    EXPECT_EQ(plain.device_bytes, 0u);
    // bf16 input, output, weights and weight gradient on the padded channel counts.
    const std::size_t pc = (c + 7) / 8 * 8, pk = (k + 7) / 8 * 8;
    const std::size_t padded_bytes =
        2 * (std::size_t{images} * 7 * 6 * pc + std::size_t{images} * g.oh * g.ow * pk + 2 * pk * 9 * pc);
    for (const char* refusal : {"unaligned-channels", "unaligned-channels-backward"}) {
      test::Env env;
      env.set("STOKER_EMULATED_CUDNN_REFUSE", refusal);
      const ConvResults padded = run_conv(g, images, x, w, dy);
      const std::string what = std::to_string(c) + " -> " + std::to_string(k) + ", " + refusal;
      EXPECT_TRUE(padded.padded) << what;
      EXPECT_EQ(padded.device_bytes, padded_bytes) << what;
      EXPECT_NE(
          padded.described.find("channels padded " + std::to_string(c) + " -> " + std::to_string((c + 7) / 8 * 8)),
          std::string::npos)
          << padded.described;
      EXPECT_EQ(padded.y, plain.y) << what;
      EXPECT_EQ(padded.dx, plain.dx) << what;
      EXPECT_EQ(padded.dw, plain.dw) << what;
    }
  }
  // A grouped convolution keeps its channels (padding would move them between groups): the refusal
  // stands, with cuDNN's reason.
  test::Env env;
  env.set("STOKER_EMULATED_CUDNN_REFUSE", "unaligned-channels");
  cudnn::ConvGeometry g;
  g.c = 6, g.h = 4, g.w = 4, g.oc = 6, g.oh = 4, g.ow = 4, g.groups = 2, g.storage = DType::BF16;
  cudnn::gpu::CudnnHandle handle;
  EXPECT_THROW(cudnn::gpu::Conv(handle, "grouped", g, 2, false, 1 << 20), cudnn::gpu::ConvNotSupported);
}

// The backend takes the padded convolutions as they are: with the stand-in refusing every
// convolution of unaligned channels, its outputs still match the CPU backend's (the padded
// convolution leaves the fused bias + ReLU to the backend's epilogue).
TEST(CudnnBackend, ConvolutionsOnPaddedChannelsGiveTheSameOutputs) {
  REQUIRE_GPU();
  if (!cuda_is_emulated()) GTEST_SKIP() << "on a GPU cuDNN decides what it refuses";
  Builder b({9, 9, 3});
  const int x = b.add(conv(8, 3, 2, Padding::Same, true, relu(6.0f)), {0});  // C 3
  const int y = b.add(conv(5, 1, 1, Padding::Valid, true, relu()), {x});     // K 5, fused ReLU asked
  Graph g = b.done({b.add(conv(8, 3, 1, Padding::Same), {y})});              // C 5
  CudnnBackendOptions o;
  o.max_batch = 4;
  const auto in = random_input(g, 3, 2);
  const auto cpu = make_cpu_backend(g)->forward(in.data(), 3);
  test::Env env;
  env.set("STOKER_EMULATED_CUDNN_REFUSE", "unaligned-channels");
  auto padded = make_cudnn_backend(g, o);
  const auto out = padded->forward(in.data(), 3);
  const std::string d = padded->describe();
  EXPECT_NE(d.find("channels padded 3 -> 8"), std::string::npos) << d;
  EXPECT_NE(d.find("channels padded 8 -> 8, 5 -> 8"), std::string::npos) << d;
  EXPECT_LT(max_rel_error(out[0].data, cpu[0].data), 1e-2);
}
#endif

TEST(CudnnBackend, InceptionResNetV2MatchesCpuBackend) {
  REQUIRE_GPU();
  if (cuda_is_emulated()) {
    GTEST_SKIP() << "emulated device: 299x299 is minutes of host convolutions there; the model's plan is checked "
                    "at 75x75 by CudnnPlan.InceptionResNetV2OnTheHost";
  }
  const Graph g = inception_resnet_v2(299);  // the size the user trains at
  const auto x = random_input(g, 2, 9);
  const auto cpu = make_cpu_backend(g)->forward(x.data(), 2);
  for (DType st : {DType::F16, DType::BF16}) {
    CudnnBackendOptions o;
    o.max_batch = 2;
    o.storage = st;
    auto gpu = make_cudnn_backend(g, o);
    const double e = max_rel_error(gpu->forward(x.data(), 2)[0].data, cpu[0].data);
    std::printf("inception_resnet_v2 gpu %s vs cpu: %.3g (%zu device bytes)\n", to_string(st), e, gpu->device_bytes());
    EXPECT_LT(e, st == DType::F16 ? 1e-2 : 5e-2);
  }
}

TEST(CudnnBackend, NoDeviceMemoryGrowthAndTwoStreams) {
  REQUIRE_GPU();
  Builder b({32, 32, 3});
  int x = b.add(conv(16, 3, 2, Padding::Same, true, relu(6.0f)), {0});
  x = b.add(depthwise(3, 1, Padding::Same, 1, true), {x});
  LayerNode g = simple(LayerKind::GlobalAveragePooling2D);
  x = b.add(g, {x});
  Graph graph = b.done({b.add(dense(10), {x})});
  CudnnBackendOptions o;
  o.max_batch = 16;
  auto gpu = make_cudnn_backend(graph, o);
  auto in = random_input(graph, 16, 5);
  DeviceBuffer dx(in.size() * sizeof(float), "test input");
  Stream s1, s2;
  copy_to_device_async(dx.get(), in.data(), in.size() * sizeof(float), s1.get());
  s1.synchronize();
  // Warm every batch size once (per-batch cuDNN descriptors are host objects, made on first use).
  for (int n = 1; n <= 16; ++n) gpu->forward_device(dx.get(), DType::F32, n, s1.get());
  s1.synchronize();
  const auto before = device_memory_info();
  std::vector<float> a(10 * 16), c(10 * 16);
  for (int i = 0; i < 200; ++i) {  // alternate streams; every third call is a full batch read back
    const bool second = (i / 3) % 2 == 1;
    const int n = i % 3 == 2 ? 16 : 1 + i % 16;
    const StreamHandle s = second ? s2.get() : s1.get();
    auto v = gpu->forward_device(dx.get(), DType::F32, n, s);
    if (n == 16) {  // the next call (maybe on the other stream) is ordered after the backend's
                    // own work only: finish reading the views before it
      copy_to_host_async(second ? c.data() : a.data(), v[0].data, a.size() * sizeof(float), s);
      (second ? s2 : s1).synchronize();
    }
  }
  s1.synchronize();
  s2.synchronize();
  const auto after = device_memory_info();
  std::printf("device free before %zu after %zu (backend holds %zu bytes)\n", before.free, after.free,
              gpu->device_bytes());
  // Slack for the driver's lazy allocations (module loading, the second stream); no growth per call.
  EXPECT_LE(before.free, after.free + (4u << 20)) << "device memory grew over 200 calls";
  auto cpu = make_cpu_backend(graph)->forward(in.data(), 16);
  EXPECT_LT(max_rel_error(a, cpu[0].data), 1e-2);
  EXPECT_LT(max_rel_error(c, cpu[0].data), 1e-2);
  EXPECT_THROW(gpu->forward_device(dx.get(), DType::F32, 17, s1.get()), InvalidArgument);
  // The host path runs larger batches in chunks of max_batch.
  std::vector<float> in40 = random_input(graph, 40, 6);
  auto big = gpu->forward(in40.data(), 40);
  auto cpu40 = make_cpu_backend(graph)->forward(in40.data(), 40);
  EXPECT_EQ(big[0].shape, cpu40[0].shape);
  EXPECT_LT(max_rel_error(big[0].data, cpu40[0].data), 1e-2);
}

}  // namespace
}  // namespace stoker::trainer
