// Flags shared by every subcommand that builds a Loader (names follow Keras where it has one).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "stoker/pipeline/loader.hpp"

namespace stoker::app {

struct LoaderFlags {
  std::string data;
  int image_size = 224;
  int batch_size = 32;
  int threads = 0;
  int prefetch = 4;
  std::uint64_t seed = 0;
  std::string interpolation = "nearest";
  std::string label_mode = "binary";
  std::string on_bad_sample = "fail";
  bool keep_aspect_ratio = false;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--data", data, "folder with one sub-folder per class")->required()->check(CLI::ExistingDirectory);
    cmd.add_option("--image-size", image_size, "square target size in pixels")->capture_default_str();
    cmd.add_option("--batch-size", batch_size, "samples per batch")->capture_default_str();
    cmd.add_option("--threads", threads, "decode threads (0 = all cores)")->capture_default_str();
    cmd.add_option("--prefetch", prefetch, "batches decoded ahead of the consumer")->capture_default_str();
    cmd.add_option("--seed", seed, "shuffle and augmentation seed")->capture_default_str();
    cmd.add_option("--interpolation", interpolation, "nearest|bilinear|area")->capture_default_str();
    cmd.add_option("--label-mode", label_mode, "binary|categorical|sparse|none")->capture_default_str();
    cmd.add_option("--on-bad-sample", on_bad_sample, "fail|skip")->capture_default_str();
    cmd.add_flag("--keep-aspect-ratio", keep_aspect_ratio, "centre-crop to the target aspect ratio first");
  }

  LoaderOptions options() const {
    LoaderOptions o;
    o.image_height = o.image_width = image_size;
    o.batch_size = batch_size;
    o.threads = threads;
    o.prefetch = prefetch;
    o.seed = seed;
    o.interpolation = parse_interpolation(interpolation);
    o.label_mode = parse_label_mode(label_mode);
    o.on_bad_sample = parse_bad_sample_policy(on_bad_sample);
    o.keep_aspect_ratio = keep_aspect_ratio;
    return o;
  }
};

}  // namespace stoker::app
