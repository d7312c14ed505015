// Fuzzes the trained-head file reader (Head::load) on arbitrary .stkh contents, then predicts with
// what it loaded.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/trainer/head.hpp>

#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = stoker_fuzz::scratch_dir() / "head.stkh";
  stoker_fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  try {
    stoker::trainer::BackboneRef ref;
    auto head = stoker::trainer::Head::load(path, &ref);
    const std::vector<float> x(static_cast<std::size_t>(head.input_dim()) * 2, 0.5f);
    auto p = head.predict(x.data(), 2);
    (void)head.predict_classes(x.data(), 2);
    if (p.size() != static_cast<std::size_t>(head.units()) * 2) std::abort();
  } catch (const stoker::Error& e) {
    if (std::getenv("STOKER_FUZZ_VERBOSE")) std::fprintf(stderr, "stoker::Error: %s\n", e.what());
  }
  return 0;
}
