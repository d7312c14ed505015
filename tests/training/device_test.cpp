// Device placement after a sticky CUDA error (on the emulated device, which can fault on demand):
// "--device auto" stops with the original error instead of going on with the CPU while the GPU
// objects already made fail at every call.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// --device cuda:N,M,... names one GPU per rank (a GPU may appear twice: two ranks share it).
TEST(DeviceList, GpuListsAreParsedAndMalformedOnesRefused) {
  EXPECT_EQ(requested_gpus("cuda:0,1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(requested_gpus("cuda:3,0,0"), (std::vector<int>{3, 0, 0}));
  EXPECT_EQ(requested_gpus("cuda:2"), (std::vector<int>{2}));
  EXPECT_TRUE(requested_gpus("cuda").empty());
  EXPECT_TRUE(requested_gpus("auto").empty());
  EXPECT_TRUE(requested_gpus("cpu").empty());
  for (const char* bad : {"cuda:", "cuda:0,", "cuda:,1", "cuda:a", "cuda:0;1", "cuda:1 ,2"}) {
    SCOPED_TRACE(bad);
    try {
      requested_gpus(bad);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("cuda:N,M,..."), std::string::npos) << e.what();
    }
  }
  if (cuda_device_count() == 0) {
    EXPECT_THROW(requested_gpus("cuda:all"), InvalidArgument);
  } else {
    EXPECT_EQ(requested_gpus("cuda:all").size(), static_cast<std::size_t>(cuda_device_count()));
  }
}

// Under a launcher each rank takes the local_rank-th GPU of the list (or of the machine's, for
// "cuda" and "auto"), wrapping around when there are more ranks than GPUs.
TEST(DeviceList, EachRankTakesItsGpuByItsPlaceOnTheMachine) {
  const int gpus = cuda_device_count();
  if (gpus == 0 || !trainer::built_with_cudnn()) GTEST_SKIP() << "no CUDA device with the cuDNN backend";
  EXPECT_EQ(choose_device("cuda", 0).index, 0);
  EXPECT_EQ(choose_device("cuda", gpus).index, 0);
  EXPECT_EQ(choose_device("cuda", 2 * gpus - 1).index, gpus - 1);
  EXPECT_EQ(choose_device("auto", gpus + 1).index, 1 % gpus);
  EXPECT_EQ(choose_device("cuda:0,0", 1).index, 0);
  const DeviceChoice last = choose_device("cuda:0," + std::to_string(gpus - 1), 3);
  EXPECT_EQ(last.index, gpus - 1);
  EXPECT_EQ(last.description.rfind("cuda:" + std::to_string(gpus - 1) + " (", 0), 0u) << last.description;
  EXPECT_THROW(choose_device("cuda:0," + std::to_string(gpus), 1), InvalidArgument);
  set_device(0);
}

}  // namespace
}  // namespace stoker::training
