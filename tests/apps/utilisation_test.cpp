// limiting_stage(): which stage the per-epoch utilisation line names, from the shares the training
// library measured (the loader's stage times, the waits, the GPU's wait for copy + augmentation).
#include <gtest/gtest.h>

#include "utilisation.hpp"

namespace stoker::app {
namespace {

Utilisation waiting_for_data() {
  Utilisation u;
  u.seconds = 10;
  u.loader_threads = 4;
  u.data_wait_share = 0.6;
  u.compute_share = 0.3;
  return u;
}

TEST(Utilisation, NamesTheBusiestInputStageWhenTheTrainerWaits) {
  Utilisation u = waiting_for_data();
  u.read_share = 0.1, u.decode_share = 0.7, u.transform_share = 0.2;
  EXPECT_EQ(limiting_stage(u), "decoding: try --cache decoded or more --threads");
  u.transform_share = 0.9;
  EXPECT_EQ(limiting_stage(u), "the augmentation on the CPU: try more --threads or --device cuda");
  u.read_share = 0.95;
  EXPECT_NE(limiting_stage(u).find("reading files"), std::string::npos);
  u.disk_read_mb_per_s = 400;
  EXPECT_NE(limiting_stage(u).find("(disk reads)"), std::string::npos);
  u.read_share = u.decode_share = u.transform_share = 0.01;
  EXPECT_NE(limiting_stage(u).find("--prefetch"), std::string::npos) << "waiting on idle threads";

  // The GPU path: most of the wait is the device's, for the copy and the augmentation there.
  Utilisation g = waiting_for_data();
  g.gpu_run = true;
  g.decode_share = 0.3;
  g.transfer_share = 0.5;
  EXPECT_NE(limiting_stage(g).find("the copy to the GPU"), std::string::npos);
  g.transfer_share = 0.1;
  EXPECT_EQ(limiting_stage(g), "decoding: try --cache decoded or more --threads");
  g.decode_share = 0.1, g.transform_share = 0.4;
  EXPECT_NE(limiting_stage(g).find("resizing on the CPU"), std::string::npos);
}

TEST(Utilisation, NamesTheModelOrTheHostWhenTheDataKeepsUp) {
  Utilisation u;
  u.data_wait_share = 0.05, u.compute_share = 0.9, u.decode_share = 0.8;
  EXPECT_EQ(limiting_stage(u), "the model's compute (the input pipeline keeps up)");
  u.compute_share = 0.3;
  EXPECT_NE(limiting_stage(u).find("host-side work"), std::string::npos);
  const std::string line = describe(u);
  EXPECT_NE(line.find("decode 80%"), std::string::npos) << line;
  EXPECT_NE(line.find("augmentation 0%"), std::string::npos) << line;
}

}  // namespace
}  // namespace stoker::app
