#include "stoker/training/model_folder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "stoker/augment/augmenter.hpp"
#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/training/checkpoint.hpp"

namespace stoker::training {
namespace {
// The name of the classifier graph stoker train exports: how predict --model knows its own file.
constexpr const char* kClassifierName = "stoker_classifier";
}  // namespace

namespace fs = std::filesystem;

AugmentSpec image_spec(const ImagePreparation& prep, AugmentSpec random, bool training) {
  AugmentSpec s = std::move(random);
  s.height = s.width = prep.image_size;
  s.dtype = DType::F32;
  s.layout = Layout::NHWC;
  if (prep.interpolation != Interpolation::CentreNearest && prep.interpolation != Interpolation::OpenCvLinear) {
    throw InvalidArgument(std::string("interpolation ") + to_string(prep.interpolation) +
                          " is not what training and prediction resize with (the augmentation's warp); use "
                          "opencv_linear (OpenCV's INTER_LINEAR, tf.image.resize's bilinear) or centre_nearest");
  }
  s.interpolation_order = prep.interpolation == Interpolation::CentreNearest ? 0 : 1;
  // Validation and prediction crop the centre as the model folder says; a random resized crop's
  // validation mode does the same.
  const CenterCrop centre{prep.center_crop, prep.keep_aspect_ratio};
  if (s.random_resized_crop) s.random_resized_crop->center = centre;
  else if (prep.keep_aspect_ratio || prep.center_crop != 1.0) s.center_crop = centre;
  s.rescale = prep.rescale;
  s.samplewise_center = prep.samplewise_center;
  s.samplewise_std_normalization = prep.samplewise_std_normalization;
  s.featurewise_center = prep.featurewise_center;
  s.featurewise_std_normalization = prep.featurewise_std_normalization;
  s.featurewise = prep.featurewise;
  if (prep.preprocess == "tf") s.normalization = ChannelNormalization::minus_one_to_one();
  else if (prep.preprocess == "caffe") s.normalization = ChannelNormalization::caffe();
  else if (prep.preprocess == "torch") s.normalization = ChannelNormalization::torch();
  else if (prep.preprocess == "rescale")
    s.normalization = ChannelNormalization{{0, 0, 0, 0}, {255, 255, 255, 255}, false};
  else if (prep.preprocess == "none") s.normalization = {};
  else
    throw InvalidArgument("preprocess must be tf, caffe, torch, rescale or none, received '" + prep.preprocess + "'");
  s.training = training;
  return s;
}

Interpolation recorded_interpolation(const std::string& name) {
  if (name == "nearest") return Interpolation::CentreNearest;
  if (name == "bilinear") return Interpolation::OpenCvLinear;
  return parse_interpolation(name);
}

void check_normalised_once(const trainer::Model& backbone, const ImagePreparation& prep,
                           const std::string& model_file) {
  const trainer::Graph& g = backbone.graph();
  // The layers between the input and the first that computes: the model's own normalisation.
  std::vector<bool> at_input(g.nodes.size(), false);
  std::string own;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const trainer::LayerNode& n = g.nodes[i];
    const bool normalises = n.keras_class == "Rescaling" || n.keras_class == "Normalization";
    const bool fed_by_input = !n.inputs.empty() && std::all_of(n.inputs.begin(), n.inputs.end(), [&](int k) {
      return at_input[static_cast<std::size_t>(k)];
    });
    at_input[i] = n.kind == trainer::LayerKind::Input || (normalises && fed_by_input);
    if (normalises && fed_by_input) own += (own.empty() ? "'" : ", '") + n.name + "' (" + n.keras_class + ")";
  }
  const bool prepared = prep.preprocess != "none" || prep.rescale || prep.samplewise_center ||
                        prep.samplewise_std_normalization || prep.featurewise_center ||
                        prep.featurewise_std_normalization;
  if (!own.empty() && prepared) {
    throw InvalidArgument(
        model_file + ": the model normalises its input itself (" + own + " after its input), and " +
        (prep.preprocess != "none" ? "--preprocess " + prep.preprocess : std::string("the standardisation")) +
        " would normalise it again; give --preprocess none (and no standardisation): it takes "
        "0..255 pixels as Keras feeds it");
  }
}

std::string feature_layer(const trainer::Model& model) {
  std::string last;
  for (const trainer::LayerInfo& l : model.layers()) {
    if (l.keras_class == "GlobalAveragePooling2D" || l.keras_class == "GlobalMaxPooling2D") last = l.name;
  }
  return last;
}

trainer::Model load_feature_backbone(const trainer::BackboneRef& ref, int image_size, std::string* cut_used) {
  trainer::LoadOptions lo;
  lo.input_hw = {image_size, image_size};
  trainer::Model backbone = trainer::load_model(ref.model, lo);
  std::string cut = ref.cut_at;
  if (cut.empty()) {
    cut = feature_layer(backbone);
    if (cut.empty() && backbone.output_shape().size() == 1) {
      throw InvalidArgument(ref.model +
                            ": no global pooling layer to take the features from (where Keras' "
                            "include_top=False, pooling='avg' ends); give --cut-at LAYER");
    }
  }
  if (!cut.empty()) backbone = backbone.cut_at(cut);
  if (cut_used) *cut_used = cut;
  const std::vector<int> in = backbone.input_shape(), out = backbone.output_shape();
  if (in != std::vector<int>{image_size, image_size, 3}) {
    throw InvalidArgument(ref.model + ": the backbone takes " + std::to_string(in.at(0)) + "x" +
                          std::to_string(in.at(1)) + "x" + std::to_string(in.at(2)) + " inputs; use an image size of " +
                          std::to_string(in.at(0)));
  }
  if (out.size() != 1) {
    throw InvalidArgument(ref.model + ": the features must be a vector per image, but the cut output has " +
                          std::to_string(out.size()) + " dimensions; cut at a pooling or flatten layer");
  }
  return backbone;
}

trainer::Graph classifier_graph(const trainer::Graph& backbone, const trainer::Head& head,
                                const ImagePreparation& prep) {
  using trainer::LayerKind;
  if (backbone.inputs.size() != 1 || backbone.outputs.size() != 1)
    throw InvalidArgument("classifier_graph: the backbone needs one input and one output");
  auto weight = [](std::vector<int> shape, std::vector<float> values) {
    return trainer::Weight{std::move(shape), std::make_shared<const std::vector<float>>(std::move(values))};
  };
  trainer::Graph g;
  g.name = kClassifierName;
  const int input = backbone.inputs[0];
  g.nodes.push_back(backbone.nodes.at(static_cast<std::size_t>(input)));
  g.inputs = {0};
  int feed = 0;
  // The loader's standardisation as a 1x1 convolution: out[c] = x[source(c)] * scale[c] + offset[c].
  const std::optional<Augmenter::ChannelAffine> affine = Augmenter(image_spec(prep)).output_affine();
  if (!affine) throw InvalidArgument("sample-wise standardisation depends on each image: no Keras layer computes it");
  const int channels = g.nodes[0].out_shape.back();
  bool identity = true;
  for (int c = 0; c < channels; ++c)
    identity = identity && affine->scale[c] == 1.0f && affine->offset[c] == 0.0f && affine->source_channel[c] == c;
  if (!identity) {
    std::vector<float> kernel(static_cast<std::size_t>(channels * channels), 0.0f), bias(channels);
    for (int c = 0; c < channels; ++c) {
      kernel[static_cast<std::size_t>(affine->source_channel[c] * channels + c)] = affine->scale[c];
      bias[static_cast<std::size_t>(c)] = affine->offset[c];
    }
    trainer::LayerNode p;
    p.name = "preprocess";
    p.keras_class = "Conv2D";
    p.kind = LayerKind::Conv2D;
    p.inputs = {0};
    p.filters = channels;
    p.use_bias = true;
    p.weights["kernel"] = weight({1, 1, channels, channels}, std::move(kernel));
    p.weights["bias"] = weight({channels}, std::move(bias));
    g.nodes.push_back(std::move(p));
    feed = 1;
  }
  std::vector<int> index(backbone.nodes.size(), -1);
  index[static_cast<std::size_t>(input)] = feed;
  for (std::size_t i = 0; i < backbone.nodes.size(); ++i) {
    if (static_cast<int>(i) == input) continue;
    trainer::LayerNode n = backbone.nodes[i];
    for (int& in : n.inputs) in = index.at(static_cast<std::size_t>(in));
    index[i] = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(n));
  }
  trainer::LayerNode d;
  d.name = "classifier";
  while (g.find(d.name) >= 0) d.name += "_";
  d.keras_class = "Dense";
  d.kind = LayerKind::Dense;
  d.inputs = {index.at(static_cast<std::size_t>(backbone.outputs[0]))};
  d.filters = head.units();
  d.use_bias = true;
  d.activation.kind =
      head.activation() == trainer::HeadActivation::Sigmoid ? trainer::ActKind::Sigmoid : trainer::ActKind::Softmax;
  d.weights["kernel"] = weight({head.input_dim(), head.units()}, head.kernel());
  d.weights["bias"] = weight({head.units()}, head.bias());
  g.nodes.push_back(std::move(d));
  g.outputs = {static_cast<int>(g.nodes.size()) - 1};
  trainer::infer_shapes_and_check(g);
  return g;
}

void write_model_info(const fs::path& dir, const ModelInfo& info) {
  nlohmann::json j;
  j["format"] = "stoker model folder 1";
  j["backbone"] = {{"model", fs::absolute(info.backbone.model).string()}, {"cut_at", info.backbone.cut_at}};
  j["image_size"] = info.prepare.image_size;
  j["interpolation"] = to_string(info.prepare.interpolation);
  j["keep_aspect_ratio"] = info.prepare.keep_aspect_ratio;
  j["preprocess"] = info.prepare.preprocess;
  const ImagePreparation& p = info.prepare;
  j["center_crop"] = p.center_crop;
  j["rescale"] = p.rescale ? nlohmann::json(*p.rescale) : nlohmann::json(nullptr);
  j["samplewise_center"] = p.samplewise_center;
  j["samplewise_std_normalization"] = p.samplewise_std_normalization;
  j["featurewise_center"] = p.featurewise_center;
  j["featurewise_std_normalization"] = p.featurewise_std_normalization;
  if (p.featurewise) j["featurewise"] = {{"mean", p.featurewise->mean}, {"std", p.featurewise->std}};
  j["class_names"] = info.class_names;
  write_file_atomically(dir / "stoker_model.json", j.dump(2) + "\n");
}

namespace {

// The folder's stoker_model.json: IoError naming it when it is missing or malformed.
ModelInfo read_model_info(const fs::path& dir) {
  const fs::path file = dir / "stoker_model.json";
  std::ifstream in(file);
  if (!in)
    throw IoError(file.string() + ": not found (is " + dir.string() + " a folder written by stoker train --out?)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw IoError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
  ModelInfo info;
  try {
    info.backbone.model = j.at("backbone").at("model").get<std::string>();
    info.backbone.cut_at = j.at("backbone").at("cut_at").get<std::string>();
    info.prepare.image_size = j.at("image_size").get<int>();
    info.prepare.interpolation = recorded_interpolation(j.at("interpolation").get<std::string>());
    info.prepare.keep_aspect_ratio = j.at("keep_aspect_ratio").get<bool>();
    info.prepare.preprocess = j.at("preprocess").get<std::string>();
    // Absent in model folders written before they were recorded: Keras' defaults.
    ImagePreparation& p = info.prepare;
    p.center_crop = j.value("center_crop", 1.0);
    if (j.contains("rescale") && !j["rescale"].is_null()) p.rescale = j["rescale"].get<double>();
    p.samplewise_center = j.value("samplewise_center", false);
    p.samplewise_std_normalization = j.value("samplewise_std_normalization", false);
    p.featurewise_center = j.value("featurewise_center", false);
    p.featurewise_std_normalization = j.value("featurewise_std_normalization", false);
    if (j.contains("featurewise")) {
      p.featurewise = FeaturewiseStats{j["featurewise"].at("mean").get<std::array<float, 4>>(),
                                       j["featurewise"].at("std").get<std::array<float, 4>>()};
    }
    info.class_names = j.at("class_names").get<std::vector<std::string>>();
    image_spec(info.prepare);  // an unknown preprocessing or interpolation fails here, naming the file
  } catch (const nlohmann::json::exception& e) {
    throw IoError(file.string() + ": missing or malformed field (" + e.what() + ")");
  } catch (const InvalidArgument& e) {
    throw IoError(file.string() + ": " + e.what());
  }
  info.backbone.preprocess = info.prepare.preprocess;
  return info;
}

// Equal bit for bit: a NaN weight equals itself here, unlike under ==.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TrainedModel load_trained_model(const fs::path& dir) {
  TrainedModel m;
  m.dir = dir;
  m.info = read_model_info(dir);
  const ModelInfo& info = m.info;
  const fs::path head_file = dir / "head.stkh";
  if (!fs::exists(head_file)) {
    if (fs::exists(dir / kCheckpointFile))
      throw IoError(dir.string() +
                    ": the run has not finished an epoch yet (no head.stkh): continue it with stoker "
                    "train --resume " +
                    dir.string());
    throw IoError(head_file.string() + ": not found (is " + dir.string() + " a folder written by stoker train --out?)");
  }
  m.head = trainer::Head::load(head_file);
  // Class names and head from two runs would label every image wrongly: refused.
  const int classes = static_cast<int>(info.class_names.size());
  const auto outputs_for = [](int k) { return k == 2 ? 1 : k; };
  if (classes < 2 || m.head->units() != outputs_for(classes)) {
    throw IoError(dir.string() + ": head.stkh has " + std::to_string(m.head->units()) + " output" +
                  (m.head->units() == 1 ? " (two classes)" : "s") + " but stoker_model.json names " +
                  std::to_string(classes) +
                  " classes: the folder mixes files of two runs; train again into it with "
                  "--overwrite, or into a new --out");
  }
  m.output = ClassifierOutput::Probabilities;
  if (fs::exists(dir / kClassifierFile)) {
    // The exported classifier up to its head: the folder needs no other file.
    trainer::LoadOptions lo;
    lo.input_hw = {info.prepare.image_size, info.prepare.image_size};
    const trainer::Model whole = trainer::load_model(dir / kClassifierFile, lo);
    const trainer::Graph& g = whole.graph();
    const trainer::LayerNode& head = g.nodes.at(static_cast<std::size_t>(g.outputs.at(0)));
    if (head.kind != trainer::LayerKind::Dense || head.inputs.size() != 1)
      throw IoError((dir / kClassifierFile).string() + ": does not end in the Dense head stoker train writes");
    // model.h5 is written when a run ends, head.stkh at each best epoch: a run continued and
    // stopped before its end leaves a model.h5 whose head is not the folder's.
    const auto kernel = head.weights.find("kernel");
    if (kernel == head.weights.end() || !kernel->second.data || !same_bits(*kernel->second.data, m.head->kernel()))
      throw IoError((dir / kClassifierFile).string() +
                    ": its head is not head.stkh's (a run continued in this folder stopped before its end): "
                    "finish it with stoker train --resume " +
                    dir.string());
    m.backbone = whole.cut_at(g.nodes.at(static_cast<std::size_t>(head.inputs[0])).name);
    m.preprocessing_in_backbone = true;
  } else {
    m.backbone = load_feature_backbone(info.backbone, info.prepare.image_size);
  }
  return m;
}

TrainedModel load_classifier(const fs::path& file, const ImagePreparation& prep, const fs::path& labels) {
  TrainedModel m;
  m.info.backbone.model = file.string();
  m.info.prepare = prep;
  if (prep.preprocess.empty()) m.info.prepare.preprocess = "tf";
  image_spec(m.info.prepare);  // an unknown preprocessing fails before the model loads
  trainer::LoadOptions lo;
  if (prep.image_size > 0) lo.input_hw = {prep.image_size, prep.image_size};
  m.backbone = trainer::load_model(file, lo);
  if (m.backbone.graph().name == kClassifierName) {  // stoker train's model.h5: 0..255 pixels in
    if (!prep.preprocess.empty() && prep.preprocess != "none")
      throw InvalidArgument(file.string() +
                            ": written by stoker train, it normalises its input itself (its first "
                            "layer); preprocessing '" +
                            prep.preprocess + "' would normalise twice: leave --preprocess out");
    m.info.prepare.preprocess = "none";
    m.preprocessing_in_backbone = true;
  }
  const std::vector<int> in = m.backbone.input_shape(), out = m.backbone.output_shape();
  m.info.prepare.image_size = in.at(0);
  if (in.size() != 3 || in[0] != in[1] || in[2] != 3) {
    throw InvalidArgument(file.string() + ": takes " + std::to_string(in.at(0)) + "x" + std::to_string(in.at(1)) +
                          " inputs with " + std::to_string(in.back()) + " channels; predict needs square RGB inputs");
  }
  if (out.size() != 1)
    throw InvalidArgument(file.string() + ": its output is not one vector of class scores per image");
  const trainer::Graph& g = m.backbone.graph();
  const trainer::ActKind last = g.nodes.at(static_cast<std::size_t>(g.outputs.at(0))).activation.kind;
  m.output = last == trainer::ActKind::Softmax   ? ClassifierOutput::Probabilities
             : last == trainer::ActKind::Sigmoid ? ClassifierOutput::SigmoidProbability
                                                 : ClassifierOutput::Logits;
  if (m.output == ClassifierOutput::SigmoidProbability && out[0] != 1)
    m.output = ClassifierOutput::Probabilities;  // independent sigmoids: reported as they are
  const int classes = m.output == ClassifierOutput::SigmoidProbability ? 2 : out[0];
  if (!labels.empty()) {
    std::ifstream in_labels(labels);
    if (!in_labels) throw IoError(labels.string() + ": cannot open");
    for (std::string line; std::getline(in_labels, line);) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) m.info.class_names.push_back(line);
    }
    if (static_cast<int>(m.info.class_names.size()) != classes)
      throw InvalidArgument(labels.string() + ": " + std::to_string(m.info.class_names.size()) + " labels for " +
                            std::to_string(classes) + " classes of " + file.string());
  } else {
    for (int c = 0; c < classes; ++c) m.info.class_names.push_back(std::to_string(c));
  }
  return m;
}

namespace {

// What the loader still does for a model whose first layer is the standardisation (model.h5).
ImagePreparation loader_preparation(const TrainedModel& m) {
  ImagePreparation p = m.info.prepare;
  if (m.preprocessing_in_backbone) {
    p.preprocess = "none";
    p.rescale.reset();
    p.featurewise_center = p.featurewise_std_normalization = false;
    p.featurewise.reset();
  }
  return p;
}

LoaderOptions use_loader(const TrainedModel& m, const UseOptions& o, LabelMode labels) {
  LoaderOptions l;
  l.batch_size = o.batch_size;
  l.threads = o.threads;
  l.shuffle = false;
  l.label_mode = labels;
  l.on_bad_sample = o.on_bad_sample;
  l.transform = std::make_shared<Augmenter>(image_spec(loader_preparation(m)));
  return l;
}

}  // namespace

Predictions predict(const TrainedModel& m, const std::vector<std::string>& paths, const UseOptions& options) {
  std::vector<Sample> samples;
  samples.reserve(paths.size());
  for (const auto& p : paths) samples.push_back({p, -1});
  LoaderOptions lo = use_loader(m, options, LabelMode::None);
  Loader loader(dataset_from_list(samples, m.info.class_names), lo);
  loader.begin_epoch(0);
  Predictions out;
  while (auto b = loader.next()) {
    const trainer::Tensor f = m.backbone.forward(reinterpret_cast<const float*>(b->pixels()), b->size());
    trainer::Tensor p = m.head ? m.head->predict(f.data.data(), b->size()) : f;
    const std::size_t width = p.data.size() / static_cast<std::size_t>(b->size());
    if (!m.head && m.output == ClassifierOutput::Logits) {  // softmax of each row
      for (std::size_t i = 0; i < p.data.size(); i += width) {
        float* row = p.data.data() + i;
        const float top = *std::max_element(row, row + width);
        double sum = 0;
        for (std::size_t k = 0; k < width; ++k) sum += row[k] = std::exp(row[k] - top);
        for (std::size_t k = 0; k < width; ++k) row[k] = static_cast<float>(row[k] / sum);
      }
    }
    for (std::size_t i = 0; i < static_cast<std::size_t>(b->size()); ++i) {
      Prediction r;
      r.path = samples[static_cast<std::size_t>(b->sample_ids()[i])].path;
      if (width == 1) {  // sigmoid: the probability of class 1
        const double p1 = p.data[i];
        r.probabilities = {1 - p1, p1};
      } else {
        r.probabilities.assign(p.data.begin() + static_cast<std::ptrdiff_t>(i * width),
                               p.data.begin() + static_cast<std::ptrdiff_t>((i + 1) * width));
      }
      r.class_index =
          static_cast<int>(std::max_element(r.probabilities.begin(), r.probabilities.end()) - r.probabilities.begin());
      out.predicted.push_back(std::move(r));
    }
  }
  out.failed = loader.skipped();
  return out;
}

Evaluation evaluate(const TrainedModel& m, const std::string& folder, const UseOptions& options,
                    const ProgressFn& progress) {
  if (!m.head) throw InvalidArgument("evaluate takes a model folder written by stoker train, with its head");
  DirectoryOptions d;
  d.classes = m.info.class_names;
  Loader loader(dataset_from_directory(folder, d), use_loader(m, options, LabelMode::Sparse));
  const Features f = collect_features(*cpu_feature_source(loader, m.backbone), 0, progress);
  if (f.n == 0)
    throw DatasetError(folder + ": none of its " + std::to_string(f.skipped.size()) + " images could be read");
  return {m.head->evaluate(f.x.data(), f.y.data(), f.n), f.skipped};
}

}  // namespace stoker::training
