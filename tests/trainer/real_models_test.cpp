// The shared real models (../shared/data/models): Darknet-tiny ImageNet top-1 against the README's
// references, MobileNetV2 α=0.35 from .h5 and TF.js, and MobileNetV2 against Keras' own outputs
// (committed vectors, scripts/keras_reference_mobilenet.py).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <span>
#include <thread>

#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <stoker/core/error.hpp>
#include <stoker/trainer/backend.hpp>
#include <stoker/trainer/model.hpp>

#include "test_support.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

using test::max_rel_error;
using test::vectors_dir;

std::filesystem::path shared_or_skip() {
  auto d = test::shared_data_dir();
  return d ? *d : std::filesystem::path();
}
#define REQUIRE_SHARED(dir)          \
  const auto dir = shared_or_skip(); \
  if (dir.empty()) GTEST_SKIP() << "shared data (../shared/data) not present; skipped"

std::vector<std::uint8_t> read_raw(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<float> softmax(const float* z, int n) {
  std::vector<float> p(z, z + n);
  const float m = *std::max_element(p.begin(), p.end());
  float s = 0;
  for (auto& v : p) s += (v = std::exp(v - m));
  for (auto& v : p) v /= s;
  return p;
}

TEST(RealModels, DarknetTinyTop1MatchesReference) {
  REQUIRE_SHARED(shared);
  Model model = load_model(shared / "models" / "tfjs" / "darknet_tiny_imagenet" / "model.json");
  EXPECT_EQ(model.input_shape(), (std::vector<int>{224, 224, 3}));
  EXPECT_EQ(model.output_shape(), (std::vector<int>{1000}));
  struct Case {
    const char* file;
    int top1;
    float prob;
  } cases[] = {{"bird.rgb", 394, 0.924f}, {"sunflower.rgb", 356, 0.33f}};
  std::vector<float> x;
  for (const auto& c : cases) {
    auto raw = read_raw(shared / "images" / c.file);
    ASSERT_EQ(raw.size(), 224u * 224 * 3) << c.file;
    for (auto v : raw) x.push_back(static_cast<float>(v) / 255.0f);
  }
  Tensor logits = model.forward(x.data(), 2);
  for (int i = 0; i < 2; ++i) {
    auto p = softmax(logits.sample(i), 1000);
    const int top = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
    std::printf("darknet %s: top-1 %d p=%.4f (reference %d %.3f)\n", cases[i].file, top,
                p[static_cast<std::size_t>(top)], cases[i].top1, cases[i].prob);
    EXPECT_EQ(top, cases[i].top1) << cases[i].file;
    EXPECT_NEAR(p[static_cast<std::size_t>(top)], cases[i].prob, 0.01) << cases[i].file;
  }
}

TEST(RealModels, MobileNetH5AndTfjsHaveIdenticalBackbones) {
  REQUIRE_SHARED(shared);
  Model h5 = load_model(shared / "models" / "keras" / "mobilenet_v2_0.35_224_3class.h5");
  Model js = load_model(shared / "models" / "tfjs" / "mobilenet_v2_0.35_224");
  Model a = h5.cut_at("out_relu"), b = js.cut_at("out_relu");
  ASSERT_EQ(a.graph().nodes.size(), b.graph().nodes.size());
  std::size_t compared = 0;
  for (std::size_t i = 0; i < a.graph().nodes.size(); ++i) {
    const auto& na = a.graph().nodes[i];
    const auto& nb = b.graph().nodes[i];
    ASSERT_EQ(na.kind, nb.kind);
    if (na.kind == LayerKind::Input) {  // the outer Sequential's input is named differently
      EXPECT_EQ(na.out_shape, nb.out_shape);
      continue;
    }
    ASSERT_EQ(na.name, nb.name);
    ASSERT_EQ(na.out_shape, nb.out_shape) << na.name;
    ASSERT_EQ(na.weights.size(), nb.weights.size()) << na.name;
    for (const auto& [key, w] : na.weights) {
      const Weight* v = nb.weight(key);
      ASSERT_NE(v, nullptr) << na.name << "/" << key;
      ASSERT_EQ(w.shape, v->shape) << na.name << "/" << key;
      EXPECT_TRUE(*w.data == *v->data) << na.name << "/" << key << " differs";
      compared += w.size();
    }
  }
  EXPECT_EQ(compared, a.parameter_count());
  EXPECT_GT(compared, 400000u);
  // Same weights and graph -> the same features, bit for bit, on the same backend.
  auto raw = read_raw(shared / "images" / "bird.rgb");
  std::vector<float> x;
  for (auto v : raw) x.push_back(static_cast<float>(v) / 127.5f - 1.0f);
  Model fa = h5.cut_at("sequential_9"), fb = js.cut_at("sequential_17");
  Tensor ya = fa.forward(x.data(), 1), yb = fb.forward(x.data(), 1);
  ASSERT_EQ(ya.shape, (std::vector<int>{1, 1280}));
  EXPECT_EQ(ya.data, yb.data);
}

TEST(RealModels, MobileNetMatchesKerasReference) {
  REQUIRE_SHARED(shared);
  const auto dir = vectors_dir() / "mobilenet";
  test::VectorFile ref(dir / "reference.json");
  Model model = load_model(shared / "models" / "keras" / "mobilenet_v2_0.35_224_3class.h5");
  const auto files = ref.meta.at("images").get<std::vector<std::string>>();
  const int n = static_cast<int>(files.size());
  std::vector<float> x;
  for (const auto& f : files) {
    if (f.size() > 4 && f.substr(f.size() - 4) == ".rgb") {  // raw 224×224 RGB from the shared data
      auto raw = read_raw(shared / f);
      ASSERT_EQ(raw.size(), 224u * 224 * 3) << f;
      for (auto v : raw) x.push_back(static_cast<float>(v) / 127.5f - 1.0f);
      continue;
    }
    cv::Mat bgr = cv::imread((dir / f).string(), cv::IMREAD_COLOR);
    ASSERT_FALSE(bgr.empty()) << f;
    ASSERT_EQ(bgr.rows, 224);
    ASSERT_EQ(bgr.cols, 224);
    cv::Mat rgb;
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
    for (int i = 0; i < 224 * 224 * 3; ++i) x.push_back(static_cast<float>(rgb.data[i]) / 127.5f - 1.0f);
  }
  Model backbone = model.cut_at(ref.meta.at("feature_layer").get<std::string>());
  Tensor features = backbone.forward(x.data(), n);
  Tensor head = model.forward(x.data(), n);
  const Tensor ref_features = ref.tensor(ref.meta.at("features"));
  const Tensor ref_head = ref.tensor(ref.meta.at("head"));
  ASSERT_EQ(features.shape, ref_features.shape);
  ASSERT_EQ(head.shape, ref_head.shape);
  double worst_f = 0, worst_h = 0, worst_elem = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<float> a(features.sample(i), features.sample(i) + 1280),
        b(ref_features.sample(i), ref_features.sample(i) + 1280);
    std::vector<float> ha(head.sample(i), head.sample(i) + 3), hb(ref_head.sample(i), ref_head.sample(i) + 3);
    const double ef = max_rel_error(a, b), eh = max_rel_error(ha, hb);
    for (std::size_t j = 0; j < a.size(); ++j)
      if (std::abs(b[j]) > 1e-2) worst_elem = std::max(worst_elem, std::abs(double(a[j]) - b[j]) / std::abs(b[j]));
    std::printf("mobilenet %s: features rel err %.3g, head rel err %.3g\n", files[static_cast<std::size_t>(i)].c_str(),
                ef, eh);
    worst_f = std::max(worst_f, ef), worst_h = std::max(worst_h, eh);
  }
  std::printf("mobilenet worst: features %.3g (per element, |ref|>1e-2: %.3g), head %.3g\n", worst_f, worst_elem,
              worst_h);
  EXPECT_LE(worst_f, 1e-4);
  EXPECT_LE(worst_h, 1e-4);
}

// Batching is only a speed-up: a batch of 32 gives each image the features it gets alone, run
// after run, all finite. (Throughput is bench/cpu_backend_bench's, not a unit test's.)
TEST(RealModels, MobileNetBatchedForwardEqualsOneImageAtATime) {
  REQUIRE_SHARED(shared);
  Model backbone = load_model(shared / "models" / "keras" / "mobilenet_v2_0.35_224_3class.h5").cut_at("sequential_9");
  const int batch = 32;
  const std::size_t per_image = 224 * 224 * 3;
  std::vector<float> x(static_cast<std::size_t>(batch) * per_image);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 255) / 127.5f - 1.0f;
  const Tensor all = backbone.forward(x.data(), batch);
  ASSERT_EQ(all.shape, (std::vector<int>{batch, 1280}));
  for (float v : all.data) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(backbone.forward(x.data(), batch).data, all.data) << "the same batch twice";
  for (int i : {0, 13, batch - 1}) {
    const Tensor one = backbone.forward(x.data() + static_cast<std::size_t>(i) * per_image, 1);
    const std::span<const float> row(all.data.data() + static_cast<std::size_t>(i) * 1280, 1280);
    EXPECT_LE(relative_error(one.data, row), 1e-5) << "image " << i;
  }
}

TEST(RealModels, SummaryCountsParametersLikeKeras) {
  REQUIRE_SHARED(shared);
  Model model = load_model(shared / "models" / "keras" / "mobilenet_v2_0.35_224_3class.h5");
  // Keras' count_params(): 538608 in all, 410208 in the backbone, 128400 in the head.
  EXPECT_EQ(model.parameter_count(), 538608u);
  EXPECT_EQ(model.cut_at("sequential_9").parameter_count(), 410208u);
  const std::string s = model.summary();
  EXPECT_NE(s.find("out_relu"), std::string::npos);
  EXPECT_NE(s.find("[?, 7, 7, 1280]"), std::string::npos) << s;
  EXPECT_NE(s.find("538608"), std::string::npos);
  const auto layers = model.layers();
  ASSERT_FALSE(layers.empty());
  EXPECT_EQ(layers.back().output_shape, (std::vector<int>{3}));
}

TEST(RealModels, DarknetRunsAtAnotherResolution) {
  REQUIRE_SHARED(shared);
  LoadOptions o;
  o.input_hw = {160, 128};  // fully convolutional: any size works
  Model model = load_model(shared / "models" / "tfjs" / "darknet_tiny_imagenet", o);
  EXPECT_EQ(model.input_shape(), (std::vector<int>{160, 128, 3}));
  std::vector<float> x(160 * 128 * 3, 0.5f);
  Tensor y = model.forward(x.data(), 1);
  EXPECT_EQ(y.shape, (std::vector<int>{1, 1000}));
}

TEST(RealModels, ConcurrentForwardCallsAgree) {
  REQUIRE_SHARED(shared);
  Model model = load_model(shared / "models" / "tfjs" / "darknet_tiny_imagenet");
  auto raw = read_raw(shared / "images" / "bird.rgb");
  std::vector<float> x;
  for (int rep = 0; rep < 3; ++rep)
    for (auto v : raw) x.push_back(static_cast<float>(v) / 255.0f);
  const Tensor ref = model.forward(x.data(), 3);
  std::vector<Tensor> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { got[static_cast<std::size_t>(t)] = model.forward(x.data(), 3); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g.data, ref.data);
  // Every sample of the batch equals the single-image result: no cross-talk between samples.
  const Tensor one = model.forward(x.data(), 1);
  for (int i = 0; i < 3; ++i)
    EXPECT_LE(max_rel_error(std::vector<float>(ref.sample(i), ref.sample(i) + 1000), one.data), 1e-6);
}

TEST(RealModels, LoadErrorsNameTheProblem) {
  test::TempDir tmp;
  EXPECT_THROW(load_model(tmp / "missing.h5"), IoError);
  { std::ofstream(tmp / "bad.h5") << "not hdf5"; }
  EXPECT_THROW(load_model(tmp / "bad.h5"), IoError);
}

}  // namespace
}  // namespace stoker::trainer
