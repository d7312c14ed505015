// A per-epoch progress bar on a terminal, plain lines (about every 10 %) otherwise.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace stoker::app {

class Progress {
 public:
  Progress(std::string label, std::size_t total_batches, std::FILE* out = stdout);
  // After each batch: images so far and, when known (>= 0), the running loss and accuracy.
  void update(std::size_t batches_done, std::size_t images, double loss = -1, double accuracy = -1);
  // Ends the bar (newline on a terminal).
  void finish();
  double seconds() const;

 private:
  std::string label_;
  std::size_t total_;
  std::FILE* out_;
  bool tty_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace stoker::app
