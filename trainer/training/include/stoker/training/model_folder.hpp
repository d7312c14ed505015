// The model folder a training run writes and evaluate / predict read:
//   head.stkh          the trained head (best epoch) with a reference to its backbone
//   stoker_model.json  how to prepare new images the same way (size, interpolation, preprocessing)
//                      and the class names
//   history.json, metrics.png, throughput.png   written by the `stoker train` command
//
//   TrainedModel m = load_trained_model("out/run1");
//   Predictions p = predict(m, {"cat.jpg", "dog.jpg"});     // class and probabilities per image
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "stoker/augment/spec.hpp"
#include "stoker/pipeline/dataset.hpp"
#include "stoker/pipeline/loader.hpp"
#include "stoker/trainer/head.hpp"
#include "stoker/trainer/model.hpp"
#include "stoker/training/feature_source.hpp"

namespace stoker::training {

// How images are prepared for the backbone; recorded in the model folder.
struct ImagePreparation {
  int image_size = 224;                                   // square, in pixels
  Interpolation interpolation = Interpolation::Bilinear;  // nearest | bilinear
  bool keep_aspect_ratio = false;                         // centre-crop to a square before resizing
  double center_crop = 1.0;       // the fraction of each side kept around the centre before resizing
  std::string preprocess = "tf";  // the backbone's preprocess_input: tf | caffe | torch | none
  // Keras' ImageDataGenerator standardisation, before `preprocess` (AugmentSpec's fields).
  std::optional<double> rescale;
  bool samplewise_center = false;
  bool samplewise_std_normalization = false;
  bool featurewise_center = false;
  bool featurewise_std_normalization = false;
  std::optional<FeaturewiseStats> featurewise;  // train() fits them on the training set
};

// What the loader runs: the random transformations of `random` (rotation, shifts, flips... as
// Keras' ImageDataGenerator) on top of `prep`'s resize and normalisation, float32 NHWC out.
// training = false keeps only the deterministic part. Throws InvalidArgument for an unknown
// preprocessing or the area interpolation (which the warp does not have).
AugmentSpec image_spec(const ImagePreparation& prep, AugmentSpec random = {}, bool training = false);

// The one place a backbone is loaded and cut: `ref.model` (Keras .h5 or TF.js model.json) at
// image_size, cut at ref.cut_at (empty: the whole model). Throws InvalidArgument unless it takes
// image_size x image_size x 3 inputs and yields a feature vector per image.
trainer::Model load_feature_backbone(const trainer::BackboneRef& ref, int image_size);

struct ModelInfo {
  trainer::BackboneRef backbone;  // the model path is stored absolute
  ImagePreparation prepare;
  std::vector<std::string> class_names;
};
// Writes stoker_model.json into `dir` (which must exist); IoError when it cannot.
void write_model_info(const std::filesystem::path& dir, const ModelInfo& info);

struct TrainedModel {
  std::filesystem::path dir;
  ModelInfo info;
  trainer::Model backbone;                         // on the CPU backend until placed elsewhere (device.hpp)
  trainer::Head head = trainer::Head::sigmoid(1);  // replaced by the loaded head
};
// Reads a model folder. IoError naming the file for a missing or malformed one.
TrainedModel load_trained_model(const std::filesystem::path& dir);

struct UseOptions {
  int batch_size = 32;
  int threads = 0;  // decode threads; 0 = all cores
  // Fail: the first unreadable image stops evaluate / predict (DecodeError naming it). Skip: it is
  // left out and reported (Evaluation::skipped, Predictions::failed).
  BadSamplePolicy on_bad_sample = BadSamplePolicy::Skip;
};

struct Prediction {
  std::string path;
  int class_index = 0;                // the most probable class
  std::vector<double> probabilities;  // one per class name
};
struct Predictions {
  std::vector<Prediction> predicted;  // in the order of the paths given, unreadable ones left out
  std::vector<SkippedSample> failed;  // the unreadable images and why
};
// Class probabilities for each image; with on_bad_sample Skip an unreadable image is reported in
// `failed`, not thrown.
Predictions predict(const TrainedModel& model, const std::vector<std::string>& paths, const UseOptions& options = {});

struct Evaluation {
  trainer::EpochStats stats;           // over the images that could be read
  std::vector<SkippedSample> skipped;  // the unreadable ones (on_bad_sample Skip) and why
};
// Loss and accuracy on a labelled folder (one sub-folder per class, the model's class names).
// DatasetError when no image of it can be read.
Evaluation evaluate(const TrainedModel& model, const std::string& folder, const UseOptions& options = {},
                    const ProgressFn& progress = {});

}  // namespace stoker::training
