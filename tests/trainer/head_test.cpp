// The transfer-learning head: Adam against a hand computation and against Keras' own steps
// (vectors/layers/adam_*.json from scripts/keras_reference_layers.py), convergence on separable
// features, and save -> load round trips.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stoker/core/error.hpp>
#include <stoker/trainer/head.hpp>

#include "test_support.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

TEST(Head, FirstAdamStepMatchesHandComputation) {
  // One feature, one sample: x = 2, y = 1, w = 0.5, b = 0.
  Head head = Head::sigmoid(1);
  head.kernel() = {0.5f};
  head.bias() = {0.0f};
  const float x = 2.0f;
  const int y = 1;
  auto r = head.train_step(&x, &y, 1);
  const double p = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(r.loss, -std::log(p), 1e-6);
  const double gw = (p - 1.0) * 2.0, gb = p - 1.0;
  // Step 1: m = 0.1 g, v = 0.001 g², alpha = 1e-3 * sqrt(0.001) / 0.1,
  // update = alpha * m / (sqrt(v) + 1e-7).
  auto step1 = [](double g) {
    const double m = 0.1 * g, v = 0.001 * g * g, alpha = 1e-3 * std::sqrt(0.001) / 0.1;
    return alpha * m / (std::sqrt(v) + 1e-7);
  };
  EXPECT_NEAR(head.kernel()[0], 0.5 - step1(gw), 1e-7);
  EXPECT_NEAR(head.bias()[0], 0.0 - step1(gb), 1e-7);
  EXPECT_NEAR(head.kernel()[0], 0.5 + 1e-3, 1e-6);  // Adam's first step is ~lr in size
  // Step 2 with the same gradient direction.
  const double p2 = 1.0 / (1.0 + std::exp(-(head.kernel()[0] * 2.0 + head.bias()[0])));
  const double gw2 = (p2 - 1.0) * 2.0;
  const double m1 = 0.1 * gw, v1 = 0.001 * gw * gw;
  const double m2 = m1 + (gw2 - m1) * 0.1, v2 = v1 + (gw2 * gw2 - v1) * 0.001;
  const double alpha2 = 1e-3 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  const double w_before = head.kernel()[0];
  head.train_step(&x, &y, 1);
  EXPECT_NEAR(head.kernel()[0], w_before - alpha2 * m2 / (std::sqrt(v2) + 1e-7), 1e-7);
  EXPECT_EQ(head.steps(), 2);
}

void check_against_keras(const char* kind) {
  test::VectorFile ref(test::vectors_dir() / "layers" / (std::string("adam_") + kind + ".json"));
  const auto& o = ref.meta.at("outputs");
  const Tensor x = ref.tensor(ref.meta.at("input"));
  const Tensor labels = ref.tensor(o.at("labels"));
  const Tensor k0 = ref.tensor(o.at("kernel0"));
  const int units = k0.shape[1];
  AdamConfig adam;
  adam.learning_rate = 0.01f;
  Head head = units == 1 ? Head::sigmoid(x.shape[1], adam) : Head::softmax(x.shape[1], units, adam);
  head.kernel() = k0.data;
  head.bias() = ref.tensor(o.at("bias0")).data;
  std::vector<int> y;
  for (float v : labels.data) y.push_back(static_cast<int>(v));
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(std::string(kind) + " step " + std::to_string(step));
    auto r = head.train_step(x.data.data(), y.data(), x.batch());
    // Keras reports the loss of the batch before the update.
    EXPECT_NEAR(r.loss, ref.tensor(o.at("loss" + std::to_string(step))).data[0], 1e-5);
    EXPECT_LE(test::max_rel_error(head.kernel(), ref.tensor(o.at("kernel" + std::to_string(step))).data), 1e-5);
    EXPECT_LE(test::max_rel_error(head.bias(), ref.tensor(o.at("bias" + std::to_string(step))).data), 1e-5);
  }
}

TEST(Head, AdamStepsMatchKerasSigmoid) { check_against_keras("sigmoid"); }
TEST(Head, AdamStepsMatchKerasSoftmax) { check_against_keras("softmax"); }

// fit()'s class_weight and the losses' label_smoothing against tf-keras 2.x
// (vectors/fit_options.json from scripts/keras_reference_fit_options.py): the loss train_on_batch
// reports (class-weighted: the weighted sum over the batch size), the weights after each step,
// one fit() epoch in two batches, and evaluate() (smoothed, not weighted).
TEST(Head, ClassWeightAndLabelSmoothingMatchKeras) {
  std::ifstream in(test::vectors_dir() / "fit_options.json");
  const auto ref = nlohmann::json::parse(in);
  auto flat = [](const nlohmann::json& rows) {
    std::vector<float> v;
    for (const auto& r : rows) {
      if (r.is_array()) {
        for (const auto& x : r) v.push_back(x.get<float>());
      } else {
        v.push_back(r.get<float>());
      }
    }
    return v;
  };
  ASSERT_EQ(ref["cases"].size(), 4u);
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<float> x = flat(c["x"]);
    const std::vector<int> y = c["y"].get<std::vector<int>>();
    const int n = static_cast<int>(y.size()), units = c["units"].get<int>();
    const int dim = static_cast<int>(x.size()) / n;
    LossOptions loss;
    loss.label_smoothing = c["label_smoothing"].get<double>();
    loss.class_weight = c["class_weight"].get<std::vector<double>>();
    AdamConfig adam;
    adam.learning_rate = 0.01f;
    auto fresh = [&] {
      Head h = units == 1 ? Head::sigmoid(dim, adam) : Head::softmax(dim, units, adam);
      h.kernel() = flat(c["kernel0"]);
      h.bias() = flat(c["bias0"]);
      return h;
    };
    Head head = fresh();
    for (std::size_t step = 0; step < 2; ++step) {
      const auto& k = c["steps"][step];
      const StepResult r = head.train_step(x.data(), y.data(), n, loss);
      EXPECT_NEAR(r.loss, k["loss"].get<double>(), 2e-6) << "step " << step;
      EXPECT_LE(test::max_rel_error(head.kernel(), flat(k["kernel"])), 1e-5) << "step " << step;
      EXPECT_LE(test::max_rel_error(head.bias(), flat(k["bias"])), 1e-5) << "step " << step;
    }
    EXPECT_NEAR(head.evaluate(x.data(), y.data(), n, {loss.label_smoothing, {}}).loss, c["evaluate_loss"].get<double>(),
                2e-6);

    // fit(batch_size=4, shuffle=False): batches of 4 and 2, the epoch's loss their size-weighted mean.
    Head fitted = fresh();
    double sum = 0;
    for (int start = 0; start < n; start += 4) {
      const int nb = std::min(4, n - start);
      sum += fitted.train_step(x.data() + start * dim, y.data() + start, nb, loss).loss * nb;
    }
    EXPECT_NEAR(sum / n, c["fit"]["loss"].get<double>(), 2e-6);
    EXPECT_LE(test::max_rel_error(fitted.kernel(), flat(c["fit"]["kernel"])), 1e-5);
    EXPECT_LE(test::max_rel_error(fitted.bias(), flat(c["fit"]["bias"])), 1e-5);
  }
}

TEST(Head, RejectsBadLossOptions) {
  Head head = Head::softmax(2, 3);
  const float x[2] = {1, 2};
  const int y = 1;
  EXPECT_THROW(head.train_step(x, &y, 1, {1.0, {}}), InvalidArgument);
  EXPECT_THROW(head.train_step(x, &y, 1, {0, {1, 2}}), InvalidArgument) << "3 classes, 2 weights";
  EXPECT_THROW(head.train_step(x, &y, 1, {0, {1, -1, 2}}), InvalidArgument);
  EXPECT_THROW(head.set_learning_rate(-1e-3f), InvalidArgument);
}

// Separable features: class c is centred on mu_c with unit noise.
void separable(int n, int d, int classes, unsigned seed, std::vector<float>& x, std::vector<int>& y) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<std::vector<float>> mu(static_cast<std::size_t>(classes),
                                     std::vector<float>(static_cast<std::size_t>(d)));
  std::mt19937 mrng(99);
  for (auto& m : mu)
    for (auto& v : m) v = 3.0f * noise(mrng);
  x.resize(static_cast<std::size_t>(n) * d);
  y.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    y[static_cast<std::size_t>(i)] = i % classes;
    for (int j = 0; j < d; ++j)
      x[static_cast<std::size_t>(i) * d + j] =
          mu[static_cast<std::size_t>(i % classes)][static_cast<std::size_t>(j)] + noise(rng);
  }
}

TEST(Head, SigmoidHeadLearnsSeparableFeatures) {
  std::vector<float> x, xv;
  std::vector<int> y, yv;
  separable(512, 64, 2, 1, x, y);
  separable(128, 64, 2, 2, xv, yv);
  Head head = Head::sigmoid(64, {}, 7);
  EpochStats s;
  for (int epoch = 0; epoch < 10; ++epoch)
    s = head.train_epoch(x.data(), y.data(), 512, 32, static_cast<std::uint64_t>(epoch));
  auto v = head.evaluate(xv.data(), yv.data(), 128);
  std::printf("sigmoid head: train loss %.4f acc %.3f, validation loss %.4f acc %.3f\n", s.loss, s.accuracy, v.loss,
              v.accuracy);
  EXPECT_GE(s.accuracy, 0.99);
  EXPECT_GE(v.accuracy, 0.99);
  EXPECT_LT(v.loss, 0.1);
}

TEST(Head, SoftmaxHeadLearnsSeparableFeatures) {
  std::vector<float> x, xv;
  std::vector<int> y, yv;
  separable(600, 48, 5, 3, x, y);
  separable(150, 48, 5, 4, xv, yv);
  Head head = Head::softmax(48, 5, {}, 7);
  EpochStats s;
  for (int epoch = 0; epoch < 10; ++epoch)
    s = head.train_epoch(x.data(), y.data(), 600, 32, static_cast<std::uint64_t>(epoch));
  auto v = head.evaluate(xv.data(), yv.data(), 150);
  std::printf("softmax head: train loss %.4f acc %.3f, validation loss %.4f acc %.3f\n", s.loss, s.accuracy, v.loss,
              v.accuracy);
  EXPECT_GE(s.accuracy, 0.99);
  EXPECT_GE(v.accuracy, 0.99);
  auto classes = head.predict_classes(xv.data(), 150);
  int correct = 0;
  for (std::size_t i = 0; i < classes.size(); ++i) correct += classes[i] == yv[i];
  EXPECT_EQ(correct / 150.0, v.accuracy);
  Tensor p = head.predict(xv.data(), 1);
  float sum = 0;
  for (float v2 : p.data) sum += v2;
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
}

TEST(Head, SaveLoadRoundTripsBitForBit) {
  test::TempDir tmp;
  std::vector<float> x;
  std::vector<int> y;
  separable(200, 16, 3, 5, x, y);
  Head head = Head::softmax(16, 3, {0.005f, 0.9f, 0.999f, 1e-7f}, 3);
  head.train_epoch(x.data(), y.data(), 200, 32, 0);
  const BackboneRef ref{"models/keras/mobilenet.h5", "sequential_9", "x/127.5-1"};
  head.save(tmp / "head.stkh", ref);
  BackboneRef got;
  Head loaded = Head::load(tmp / "head.stkh", &got);
  EXPECT_EQ(got.model, ref.model);
  EXPECT_EQ(got.cut_at, ref.cut_at);
  EXPECT_EQ(got.preprocess, ref.preprocess);
  EXPECT_EQ(loaded.kernel(), head.kernel());
  EXPECT_EQ(loaded.bias(), head.bias());
  EXPECT_EQ(loaded.steps(), head.steps());
  EXPECT_EQ(loaded.adam().learning_rate, 0.005f);
  EXPECT_EQ(loaded.predict(x.data(), 200).data, head.predict(x.data(), 200).data);
  // Adam's moments travel too: one more epoch on both stays identical.
  head.train_epoch(x.data(), y.data(), 200, 32, 1);
  loaded.train_epoch(x.data(), y.data(), 200, 32, 1);
  EXPECT_EQ(loaded.kernel(), head.kernel());
  // Sigmoid head too.
  Head s = Head::sigmoid(16, {}, 1);
  s.save(tmp / "s.stkh");
  EXPECT_EQ(Head::load(tmp / "s.stkh").kernel(), s.kernel());
}

// A head file carries a checksum: a damaged byte anywhere is a named error, never other weights.
TEST(Head, ADamagedFileIsRefused) {
  test::TempDir tmp;
  Head::sigmoid(8, {}, 1).save(tmp / "head.stkh");
  std::vector<std::uint8_t> bytes = test::read_bytes(tmp / "head.stkh");
  bytes[bytes.size() - 40] ^= 0x10;  // inside the bias
  test::write_bytes(tmp / "head.stkh", bytes);
  try {
    Head::load(tmp / "head.stkh");
    FAIL() << "a damaged head loaded";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("head.stkh: damaged"), std::string::npos) << e.what();
  }
}

// A NaN loss compares false with everything: it must not beat a finite epoch, nor be the first best.
TEST(BestEpoch, ANonFiniteLossIsNeverTheBest) {
  const Head head = Head::sigmoid(2, {}, 1);
  BestEpoch best(Monitor::ValLoss);
  EXPECT_FALSE(best.offer(0, {std::nan(""), 0.5, 4}, head));
  EXPECT_EQ(best.epoch(), -1);
  EXPECT_TRUE(best.offer(1, {0.3, 0.5, 4}, head));
  EXPECT_FALSE(best.offer(2, {std::nan(""), 0.5, 4}, head));
  EXPECT_FALSE(best.offer(3, {std::numeric_limits<double>::infinity(), 0.5, 4}, head));
  EXPECT_EQ(best.epoch(), 1);
  BestEpoch by_accuracy(Monitor::ValAccuracy);
  EXPECT_TRUE(by_accuracy.offer(0, {0.3, 0.5, 4}, head));
  EXPECT_FALSE(by_accuracy.offer(1, {std::nan(""), 0.9, 4}, head)) << "a better accuracy with a NaN loss";
}

TEST(Head, BadInputsThrow) {
  EXPECT_THROW(Head::softmax(4, 1), InvalidArgument);
  EXPECT_THROW(Head(4, 2, HeadActivation::Sigmoid), InvalidArgument);
  Head h = Head::sigmoid(2);
  float x[2] = {1, 2};
  int bad = 2;
  EXPECT_THROW(h.train_step(x, &bad, 1), InvalidArgument);
  test::TempDir tmp;
  test::write_bytes(tmp / "junk", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  EXPECT_THROW(Head::load(tmp / "junk"), IoError);
  EXPECT_THROW(Head::load(tmp / "absent"), IoError);
}

// Found by tests/fuzz/fuzz_head: a tensor offset near 2^64 wrapped past the bounds check (memcpy
// from before the buffer), a huge input_dim x units was allocated before anything was checked,
// out-of-range numbers went through get<int>() / get<size_t>(), a header without a "kernel" tensor
// loaded a randomly initialised head, and Head's own InvalidArgument escaped as a non-IoError.
TEST(Head, BogusHeaderFieldsAreIoErrorsNamingTheFile) {
  test::TempDir tmp;
  Head good = Head::sigmoid(3, {}, 1);
  good.save(tmp / "good.stkh");
  const auto bytes = test::read_bytes(tmp / "good.stkh");
  std::uint64_t len;
  std::memcpy(&len, bytes.data() + 8, 8);
  const auto header = nlohmann::json::parse(bytes.begin() + 16, bytes.begin() + 16 + static_cast<long>(len));
  // Without the checksum trailer: the files made here are read as files written before trailers
  // were, so that each reaches the check of its header.
  const std::vector<std::uint8_t> tensors(bytes.begin() + 16 + static_cast<long>(len), bytes.end() - 16);
  auto write_with = [&](const nlohmann::json& h) {
    const std::string text = h.dump();
    std::vector<std::uint8_t> file(16 + text.size() + tensors.size());
    const std::uint64_t size = text.size();
    std::memcpy(file.data(), bytes.data(), 8);  // the magic
    std::memcpy(file.data() + 8, &size, 8);
    std::memcpy(file.data() + 16, text.data(), text.size());
    std::memcpy(file.data() + 16 + text.size(), tensors.data(), tensors.size());
    test::write_bytes(tmp / "bad.stkh", file);
  };
  auto expect_error = [&](const nlohmann::json& h, const std::string& what) {
    write_with(h);
    try {
      Head::load(tmp / "bad.stkh");
      FAIL() << "expected IoError about " << what;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.stkh"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  write_with(header);  // control: the re-assembled file loads
  EXPECT_EQ(Head::load(tmp / "bad.stkh").kernel(), good.kernel());

  ASSERT_EQ(header["tensors"][1]["name"], "bias");
  auto h = header;
  h["tensors"][1]["offset"] = std::numeric_limits<std::uint64_t>::max();  // offset + 1 wraps to 0
  expect_error(h, "offset of tensor 'bias' 18446744073709551615 is out of range");
  h["tensors"][1]["offset"] = 12;  // one past the last value
  expect_error(h, "tensor 'bias' lies past the end of the file");
  h = header;
  h["input_dim"] = 1000000;
  h["tensors"][0]["shape"] = {1000000, 1};
  expect_error(h, "needs more weights than the file's");
  h = header;
  h["input_dim"] = 1e10;
  expect_error(h, "input_dim must be an integer");
  h = header;
  h["units"] = 4294967297ll;
  expect_error(h, "units 4294967297 is out of range");
  h = header;
  h["tensors"].erase(0);
  expect_error(h, "has no 'kernel' tensor");
  h = header;
  h["tensors"][0]["shape"] = {1, 3};
  expect_error(h, "tensor 'kernel' has shape [1,3]");
  h = header;
  h["optimizer"]["iterations"] = -5;
  expect_error(h, "optimizer iterations -5 is out of range");
  h = header;
  h["units"] = 2;  // a sigmoid head has one unit: Head's InvalidArgument, reported as the file's error
  h["tensors"] = nlohmann::json::array();
  expect_error(h, "a sigmoid head has 1 unit");
}

}  // namespace
}  // namespace stoker::trainer
