// Device placement after a sticky CUDA error (on the emulated device, which can fault on demand):
// "--device auto" stops with the original error instead of going on with the CPU while the GPU
// objects already made fail at every call.
#include <gtest/gtest.h>

#include <string>

#include "stoker/core/cuda.hpp"
#include "stoker/core/error.hpp"
#include "stoker/training/device.hpp"
#if defined(STOKER_CUDA_EMULATION)
#include "stoker/core/detail/cuda_emulation.hpp"
#endif

namespace stoker::training {
namespace {

#if defined(STOKER_CUDA_EMULATION)
TEST(DeviceFallback, StickyFaultStopsAutoWithTheOriginalError) {
  {
    const Stream stream;
    emulation::fail_next_launch(700);  // cudaErrorIllegalAddress
    emulation::launch(stream.get(), [] {});
    EXPECT_THROW(stream.synchronize(), CudaError);
  }
  auto expect_original = [](const char* what, auto&& call) {
    SCOPED_TRACE(what);
    try {
      call();
      ADD_FAILURE() << "went on";
    } catch (const CudaError& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), 700) << m;
      EXPECT_NE(m.find("the CUDA context is unusable since"), std::string::npos) << m;
      EXPECT_NE(m.find("cudaErrorIllegalAddress"), std::string::npos) << m;
      EXPECT_NE(m.find("--device auto"), std::string::npos) << m;
    }
  };
  DeviceChoice chosen{true, 0, true, "cuda:0"};
  expect_original("a check's fallback", [&] { chosen.fall_back_to_cpu("features differ"); });
  EXPECT_TRUE(chosen.cuda) << "the choice is left as it was";
  expect_original("a new auto choice", [] { choose_device("auto"); });
  emulation::reset_after_fault();
  EXPECT_NO_THROW(refuse_cpu_after_gpu_fault());
  DeviceChoice again{true, 0, true, "cuda:0"};
  again.fall_back_to_cpu("features differ");
  EXPECT_FALSE(again.cuda);
  EXPECT_EQ(again.fallback_reason, "features differ");
}
#endif

TEST(DeviceFallback, AutoFallsBackWhileTheContextIsUsable) {
  EXPECT_TRUE(cuda_context_lost_reason().empty());
  DeviceChoice chosen{true, 0, true, "cuda:0"};
  chosen.fall_back_to_cpu("the backbone differs");
  EXPECT_FALSE(chosen.cuda);
  EXPECT_TRUE(chosen.automatic);
  EXPECT_EQ(chosen.fallback_reason, "the backbone differs");
}

}  // namespace
}  // namespace stoker::training
