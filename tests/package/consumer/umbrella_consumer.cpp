#include <cstdio>
#include <string>

#include <stoker/core/error.hpp>
#include <stoker/training/model_folder.hpp>
#include <stoker/training/train.hpp>

// Trains a head for one epoch on <data folder> with <backbone .h5> into <out folder>, then
// predicts the first training image from the saved model.
int main(int argc, char** argv) {
  if (argc != 4) return 2;
  try {
    stoker::training::TrainOptions o;
    o.backbone = {argv[2], "sequential_9", ""};
    o.prepare.image_size = 64;
    o.epochs = 1;
    o.device = "cpu";
    o.out = argv[3];
    const auto data = stoker::training::training_data(argv[1], 0.2);
    const auto result = stoker::training::train(data, o);
    const auto model = stoker::training::load_trained_model(o.out);
    const auto p = stoker::training::predict(model, {data.train.samples.at(0).path});
    std::printf("umbrella_consumer: validation accuracy %.2f, predicted %s\n", result.history.at(0).validation.accuracy,
                model.info.class_names.at(static_cast<std::size_t>(p.predicted.at(0).class_index)).c_str());
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
