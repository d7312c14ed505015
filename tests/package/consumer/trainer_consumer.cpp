#include <cstdio>
#include <vector>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

// Imports the Keras backbone given on the command line at 32x32 and runs one image through it.
int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    stoker::trainer::LoadOptions lo;
    lo.input_hw = {32, 32};
    const stoker::trainer::Model model = stoker::trainer::load_model(argv[1], lo).cut_at("sequential_9");
    const std::vector<float> image(32 * 32 * 3, 0.5f);
    const stoker::trainer::Tensor features = model.forward(image.data(), 1);
    std::printf("trainer_consumer: %zu parameters, %zu features\n", model.parameter_count(), features.data.size());
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
