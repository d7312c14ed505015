#include <cstdio>
#include <memory>

#include <stoker/augment/augmenter.hpp>
#include <stoker/core/error.hpp>
#include <stoker/pipeline/loader.hpp>

// Loads and augments the folder given on the command line; prints the images delivered.
int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    stoker::AugmentSpec aug;
    aug.height = aug.width = 32;
    aug.horizontal_flip = true;
    aug.rotation_range = 15;
    stoker::LoaderOptions options;
    options.batch_size = 8;
    options.transform = std::make_shared<stoker::Augmenter>(aug);
    stoker::Loader loader(stoker::dataset_from_directory(argv[1]), options);
    loader.begin_epoch(0);
    int images = 0;
    while (auto batch = loader.next()) images += batch->size();
    std::printf("loader_consumer loaded %d images\n", images);
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
