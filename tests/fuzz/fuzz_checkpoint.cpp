// Fuzzes the files a resumed run reads back from its folder: the checkpoint (load_checkpoint: the
// loader state, the history, the heads and their optimizer state, the fine-tuning progress and the
// backbone file it names) and the training features file (load_features: counts and dimensions
// against the file's size). Byte 0's bit 0 picks the file; the rest is its contents. A checkpoint
// it accepts must save and load back to the same epoch and history length.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <stoker/core/error.hpp>
#include <stoker/training/checkpoint.hpp>

#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool features = (data[0] & 1) != 0;
  const auto dir = stoker_fuzz::scratch_dir();
  const auto path = dir / (features ? "checkpoint-features.bin" : "checkpoint.stkc");
  stoker_fuzz::write_file(path, {reinterpret_cast<const char*>(data) + 1, size - 1});
  try {
    if (features) {
      (void)stoker::training::load_features(path);
    } else {
      const auto c = stoker::training::load_checkpoint(path);
      const auto again_path = dir / "again.stkc";
      stoker::training::save_checkpoint(again_path, c);
      const auto again = stoker::training::load_checkpoint(again_path);
      if (again.epoch != c.epoch || again.history.size() != c.history.size() || !(again.loader == c.loader)) {
        std::abort();
      }
    }
  } catch (const stoker::Error& e) {
    if (std::getenv("STOKER_FUZZ_VERBOSE")) std::fprintf(stderr, "stoker::Error: %s\n", e.what());
  }
  return 0;
}
