// The training recipe on the shared cats-vs-dogs photos: MobileNetV2 α=0.35 frozen
// (features after GlobalAveragePooling2D), full image resized bilinearly to 224, x/127.5-1, a
// Dense(1, sigmoid) head with binary cross-entropy and Adam 1e-3, batch 32; 20 % of each class
// held out. Features are computed once and reused across epochs.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <stoker/trainer/head.hpp>
#include <stoker/trainer/model.hpp>

#include "test_support.hpp"

namespace stoker::trainer {
namespace {

TEST(CatsDogs, FrozenMobileNetSigmoidHead) {
  const auto shared = test::shared_data_dir();
  if (!shared) GTEST_SKIP() << "shared data (../shared/data) not present; skipped";
  const auto root = *shared / "catsdogs";
  std::vector<std::pair<std::filesystem::path, int>> train_files, val_files;
  int cls = 0;
  for (const char* name : {"cat", "dog"}) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(root / name))
      if (e.path().extension() == ".jpg") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (std::size_t i = 0; i < files.size(); ++i) (i % 5 == 0 ? val_files : train_files).emplace_back(files[i], cls);
    ++cls;
  }
  ASSERT_GT(train_files.size(), 100u);

  const auto t0 = std::chrono::steady_clock::now();
  Model backbone = load_model(*shared / "models" / "keras" / "mobilenet_v2_0.35_224_3class.h5").cut_at("sequential_9");
  ASSERT_EQ(backbone.output_shape(), (std::vector<int>{1280}));
  auto features = [&](const std::vector<std::pair<std::filesystem::path, int>>& files, std::vector<float>& f,
                      std::vector<int>& labels) {
    const int batch = 32;
    std::vector<float> x;
    for (std::size_t start = 0; start < files.size(); start += batch) {
      const std::size_t nb = std::min<std::size_t>(batch, files.size() - start);
      x.assign(nb * 224 * 224 * 3, 0.0f);
      for (std::size_t i = 0; i < nb; ++i) {
        cv::Mat bgr = cv::imread(files[start + i].first.string(), cv::IMREAD_COLOR);
        ASSERT_FALSE(bgr.empty()) << files[start + i].first;
        cv::Mat rgb, resized;
        cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
        cv::resize(rgb, resized, cv::Size(224, 224), 0, 0, cv::INTER_LINEAR);
        float* dst = x.data() + i * 224 * 224 * 3;
        for (int p = 0; p < 224 * 224 * 3; ++p) dst[p] = static_cast<float>(resized.data[p]) / 127.5f - 1.0f;
        labels.push_back(files[start + i].second);
      }
      Tensor y = backbone.forward(x.data(), static_cast<int>(nb));
      f.insert(f.end(), y.data.begin(), y.data.end());
    }
  };
  std::vector<float> xt, xv;
  std::vector<int> yt, yv;
  features(train_files, xt, yt);
  features(val_files, xv, yv);
  const double feature_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  Head head = Head::sigmoid(1280, {}, 42);
  FitOptions opt;
  opt.epochs = 20;
  opt.batch_size = 32;
  opt.monitor = Monitor::ValLoss;
  opt.on_epoch = [](const EpochRecord& r) {
    std::printf("epoch %2d  loss %.4f acc %.4f  val_loss %.4f val_acc %.4f%s\n", r.epoch + 1, r.train.loss,
                r.train.accuracy, r.validation.loss, r.validation.accuracy, r.improved ? "  *" : "");
  };
  auto result = fit(head, xt.data(), yt.data(), static_cast<int>(yt.size()), xv.data(), yv.data(),
                    static_cast<int>(yv.size()), opt);
  const auto& best = result.history[static_cast<std::size_t>(result.best_epoch)];
  const auto& last = result.history.back();
  std::printf(
      "catsdogs: %zu train / %zu validation images, features in %.1f s; best epoch %d: val_acc %.4f "
      "val_loss %.4f; last epoch: val_acc %.4f val_loss %.4f\n",
      yt.size(), yv.size(), feature_s, result.best_epoch + 1, best.validation.accuracy, best.validation.loss,
      last.validation.accuracy, last.validation.loss);
  RecordProperty("val_accuracy", std::to_string(best.validation.accuracy));
  RecordProperty("val_log_loss", std::to_string(best.validation.loss));
  EXPECT_GE(best.validation.accuracy, 0.94);
  EXPECT_LE(best.validation.loss, 0.15);
  // restore_best left the head at the best epoch.
  EXPECT_DOUBLE_EQ(head.evaluate(xv.data(), yv.data(), static_cast<int>(yv.size())).loss, best.validation.loss);
}

}  // namespace
}  // namespace stoker::trainer
