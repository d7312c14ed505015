#include <cstdio>

#include <stoker/error.hpp>
#include <stoker/pipeline/loader.hpp>

// Loads the folder given on the command line and prints the number of images it delivered.
int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    stoker::LoaderOptions options;
    options.image_height = options.image_width = 32;
    options.batch_size = 8;
    stoker::Loader loader(stoker::dataset_from_directory(argv[1]), options);
    loader.begin_epoch(0);
    int images = 0;
    while (auto batch = loader.next()) images += batch->size();
    std::printf("consumer loaded %d images\n", images);
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
