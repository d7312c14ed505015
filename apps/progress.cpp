#include "progress.hpp"

#include <unistd.h>

#include <algorithm>

namespace stoker::app {

Progress::Progress(std::string label, std::size_t total_batches, std::FILE* out)
    : label_(std::move(label)),
      total_(std::max<std::size_t>(1, total_batches)),
      out_(out),
      tty_(::isatty(::fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()) {}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(std::size_t done, std::size_t images, double loss, double accuracy) {
  const double t = seconds();
  const double rate = t > 0 ? static_cast<double>(images) / t : 0;
  const double eta = done > 0 ? t * static_cast<double>(total_ - done) / static_cast<double>(done) : 0;
  char metrics[64] = "";
  if (loss >= 0) std::snprintf(metrics, sizeof metrics, "  loss %.4f  acc %.4f", loss, accuracy);
  if (tty_) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * done / total_);
    std::fprintf(out_, "\r%s [%.*s%*s] %zu/%zu  %.0f img/s  ETA %.0fs%s ", label_.c_str(), filled,
                 "========================", kWidth - filled, "", done, total_, rate, eta, metrics);
    std::fflush(out_);
    return;
  }
  const int decile = static_cast<int>(10 * done / total_);
  if (decile != last_decile_ && (decile % 5 == 0 || done == total_)) {
    last_decile_ = decile;
    std::fprintf(out_, "%s %zu/%zu batches  %.0f img/s  ETA %.0fs%s\n", label_.c_str(), done, total_, rate, eta,
                 metrics);
    std::fflush(out_);
  }
}

void Progress::finish() {
  if (tty_) std::fprintf(out_, "\n");
}

}  // namespace stoker::app
