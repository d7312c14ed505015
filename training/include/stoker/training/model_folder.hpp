// The model folder a training run writes and evaluate / predict read:
//   model.h5           the whole classifier (preprocessing, backbone, head of the best epoch) as a
//                      Keras 2 HDF5 model that tf_keras.models.load_model opens
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
  int image_size = 224;  // square, in pixels
  // The warp's own resize: centre_nearest (order 0) | opencv_linear (order 1, OpenCV's INTER_LINEAR
  // as tf.image.resize's bilinear). Not Pillow's filters: training and prediction never run those.
  Interpolation interpolation = Interpolation::OpenCvLinear;
  bool keep_aspect_ratio = false;  // centre-crop to a square before resizing
  double center_crop = 1.0;        // the fraction of each side kept around the centre before resizing
  std::string preprocess = "tf";   // the backbone's preprocess_input: tf | caffe | torch | rescale (x/255) | none
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
// preprocessing or an interpolation the warp does not have (Pillow's filters, area).
AugmentSpec image_spec(const ImagePreparation& prep, AugmentSpec random = {}, bool training = false);

// The filter a model folder or a run's settings name. Folders and runs written before the filters
// had one name each recorded the warp's resize as "nearest" and "bilinear": those read as the
// centre_nearest and opencv_linear that ran. Throws InvalidArgument for an unknown name.
Interpolation recorded_interpolation(const std::string& name);

// The one place a backbone is loaded and cut: `ref.model` (Keras .h5 or TF.js model.json) at
// image_size, cut at ref.cut_at — or, when that is empty, where Keras' include_top=False,
// pooling='avg' would end it: the last global pooling layer (feature_layer; none: the whole model,
// when its output is not a vector). `cut_used` receives the layer cut at (empty: none). Throws
// InvalidArgument unless it takes image_size x image_size x 3 inputs and yields a feature vector
// per image, and for a vector-output model without global pooling and without ref.cut_at (a
// classifier whose class scores would otherwise become the features).
trainer::Model load_feature_backbone(const trainer::BackboneRef& ref, int image_size, std::string* cut_used = nullptr);
// Throws InvalidArgument naming `model_file` when the backbone normalises its input itself (a
// Rescaling or Normalization layer right after its input, as Keras 3's EfficientNet and ConvNeXt
// have) and `prep` normalises it too (a --preprocess other than none, or a standardisation): the
// backbone would be trained on twice-normalised pixels.
void check_normalised_once(const trainer::Model& backbone, const ImagePreparation& prep, const std::string& model_file);
// The last global pooling layer (average or max) of `model`, or empty.
std::string feature_layer(const trainer::Model& model);

// The whole classifier as one graph: the image input (resized and cropped as `prep` says, 0..255),
// the standardisation `prep` applies (rescale, featurewise statistics, the preprocessing: one 1x1
// convolution "preprocess", exact per channel: scale, offset, RGB->BGR; none when it is the
// identity), the backbone, and the head as a Dense layer "classifier" with its sigmoid or softmax.
// What `train` exports as model.h5. InvalidArgument for sample-wise standardisation.
trainer::Graph classifier_graph(const trainer::Graph& backbone, const trainer::Head& head,
                                const ImagePreparation& prep);

struct ModelInfo {
  trainer::BackboneRef backbone;  // the model path is stored absolute
  ImagePreparation prepare;
  std::vector<std::string> class_names;
};
// Writes stoker_model.json into `dir` (which must exist); IoError when it cannot.
void write_model_info(const std::filesystem::path& dir, const ModelInfo& info);

inline constexpr const char* kClassifierFile = "model.h5";
// The backbone with the weights fine-tuning gave it (TrainOptions::fine_tune), as Keras HDF5.
inline constexpr const char* kFineTunedBackboneFile = "backbone.h5";

enum class ClassifierOutput { Probabilities, SigmoidProbability, Logits };

struct TrainedModel {
  std::filesystem::path dir;
  ModelInfo info;
  // On the CPU backend until placed elsewhere (device.hpp). From the folder's model.h5 when it has
  // one (then the preprocessing is its first layer), else from info.backbone.
  trainer::Model backbone;
  bool preprocessing_in_backbone = false;
  std::optional<trainer::Head> head;                          // a model folder's head; none for a whole classifier file
  ClassifierOutput output = ClassifierOutput::Probabilities;  // what the last layer gives (without a head)
};
// Reads a model folder. IoError naming the file for a missing or malformed one.
TrainedModel load_trained_model(const std::filesystem::path& dir);
// Any whole classifier (Keras .h5, TF.js model.json) for predict: images prepared by `prep` (its
// image_size 0: the model's own input size; its preprocess empty: "none" for a model.h5 stoker
// train wrote, whose first layer normalises, else "tf"; another one for such a model is refused, as
// it would normalise twice), class names from `labels` (one per line) or "0".."K-1". A last layer without softmax or
// sigmoid gives logits: predict applies a softmax. InvalidArgument for a model that does not take square RGB images and
// yield one score vector, or a label count that is not the class count.
TrainedModel load_classifier(const std::filesystem::path& file, const ImagePreparation& prep,
                             const std::filesystem::path& labels = {});

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
