// Every layer type against Keras' own outputs (tests/trainer/vectors/layers, written by
// scripts/keras_reference_layers.py): the model is imported from the .h5, cut at each layer,
// and run on the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <stoker/core/error.hpp>
#include <stoker/trainer/model.hpp>

#include "test_support.hpp"
#include "vectors.hpp"

namespace stoker::trainer {
namespace {

using test::max_rel_error;
using test::VectorFile;
using test::vectors_dir;

void check_every_layer(const std::string& name, const CpuBackendOptions& options, double tolerance) {
  const auto dir = vectors_dir() / "layers";
  Model model = load_model(dir / (name + ".h5"));
  VectorFile ref(dir / (name + ".json"));
  const Tensor x = ref.tensor(ref.meta.at("input"));
  int checked = 0;
  double worst = 0.0;
  for (const auto& [layer, entry] : ref.meta.at("outputs").items()) {
    SCOPED_TRACE("layer " + layer);
    Model cut = model.cut_at(layer);
    cut.set_backend(make_cpu_backend(cut.graph(), options));
    Tensor y = cut.forward(x.data.data(), x.batch());
    const Tensor expected = ref.tensor(entry);
    ASSERT_EQ(y.shape, expected.shape);
    const double err = max_rel_error(y.data, expected.data);
    EXPECT_LE(err, tolerance) << "relative error " << err;
    worst = std::max(worst, err);
    ++checked;
  }
  std::printf("%s: %d layers, max relative error vs Keras %.3g\n", name.c_str(), checked, worst);
  EXPECT_GE(checked, 3);
}

TEST(KerasLayers, EveryLayerMatchesKerasFolded) { check_every_layer("layers_functional", {}, 1e-5); }

TEST(KerasLayers, EveryLayerMatchesKerasUnfused) {
  CpuBackendOptions o;
  o.fold_batch_norm = false;
  o.fuse_activations = false;
  check_every_layer("layers_functional", o, 1e-5);
}

TEST(KerasLayers, InceptionResNetBlockMatchesKeras) {
  check_every_layer("inception_resnet_block", {}, 1e-5);
  CpuBackendOptions o;
  o.fold_batch_norm = false;
  o.fuse_activations = false;
  check_every_layer("inception_resnet_block", o, 1e-5);
}

// elu, selu, gelu (erf form), softplus, hard_sigmoid (tf_keras' 0.2 x + 0.5) as Activation layers,
// fused into Conv2D and Dense, and the ELU layer.
TEST(KerasLayers, NewerActivationsMatchKeras) {
  check_every_layer("layers_activations", {}, 1e-5);
  CpuBackendOptions o;
  o.fold_batch_norm = false;
  o.fuse_activations = false;
  check_every_layer("layers_activations", o, 1e-5);
}

// Squeeze-and-excitation (EfficientNet's): Reshape to [1, 1, C], Multiply with the broadcast either
// way round and of equal shapes, GlobalMaxPooling2D (keepdims too), Reshape to rows before a Dense.
TEST(KerasLayers, SqueezeExcitationReshapeMultiplyGlobalMaxMatchKeras) {
  check_every_layer("layers_se", {}, 1e-5);
  CpuBackendOptions o;
  o.fold_batch_norm = false;
  o.fuse_activations = false;
  check_every_layer("layers_se", o, 1e-5);
}

// SeparableConv2D (same/valid, stride 2, depth_multiplier 2, dilation, no bias, BN after it),
// Normalization (adapted mean/variance) on images and vectors, LayerNormalization with and without
// gamma/beta on images (over the channels) and vectors.
TEST(KerasLayers, SeparableConvNormalizationLayerNormMatchKeras) {
  check_every_layer("layers_norm_separable", {}, 1e-5);
  CpuBackendOptions o;
  o.fold_batch_norm = false;
  o.fuse_activations = false;
  check_every_layer("layers_norm_separable", o, 1e-5);
}

// Keras Applications' own EfficientNet builder at width/depth 0.1 on 32×32: the whole backbone
// (Rescaling, Normalization, squeeze-and-excitation, swish, residual Adds) as Keras builds it.
TEST(KerasLayers, EfficientNetTinyMatchesKeras) {
  check_every_layer("efficientnet_tiny", {}, 1e-5);
  CpuBackendOptions o;
  o.fold_batch_norm = false;
  o.fuse_activations = false;
  check_every_layer("efficientnet_tiny", o, 1e-5);
}

TEST(KerasLayers, NestedSequentialAndFunctional) { check_every_layer("nested", {}, 1e-5); }

TEST(KerasLayers, WholeModelHasThreeOutputs) {
  const auto dir = vectors_dir() / "layers";
  Model model = load_model(dir / "layers_functional.h5");
  VectorFile ref(dir / "layers_functional.json");
  const Tensor x = ref.tensor(ref.meta.at("input"));
  auto outs = model.forward_all(x.data.data(), x.batch());
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_LE(max_rel_error(outs[0].data, ref.tensor(ref.meta["outputs"]["dense_softmax"]).data), 1e-5);
  EXPECT_LE(max_rel_error(outs[1].data, ref.tensor(ref.meta["outputs"]["dense_sigmoid"]).data), 1e-5);
  EXPECT_LE(max_rel_error(outs[2].data, ref.tensor(ref.meta["outputs"]["act_softmax"]).data), 1e-5);
  EXPECT_THROW(model.forward(x.data.data(), x.batch()), InvalidArgument);
}

// save_keras_h5 -> load_model: every layer of the written model computes what Keras computed. A
// layer the writer splits in two (a fused capped ReLU) is compared at its second part, a nested
// model (written flat) at its output layer.
TEST(KerasLayers, WrittenAsKerasH5EveryLayerStillMatchesKeras) {
  const auto dir = vectors_dir() / "layers";
  for (const std::string name : {"layers_functional", "inception_resnet_block", "nested", "layers_activations",
                                 "layers_se", "layers_norm_separable", "efficientnet_tiny"}) {
    SCOPED_TRACE(name);
    test::TempDir out;
    const Model original = load_model(dir / (name + ".h5"));
    save_keras_h5(original.graph(), out / "written.h5");
    const Model written = load_model(out / "written.h5");
    VectorFile ref(dir / (name + ".json"));
    const Tensor x = ref.tensor(ref.meta.at("input"));
    int checked = 0;
    for (const auto& [layer, entry] : ref.meta.at("outputs").items()) {
      SCOPED_TRACE("layer " + layer);
      // A nested model is written flat: it is compared at its output layer.
      const auto nested = original.graph().model_outputs.find(layer);
      const std::string node = nested != original.graph().model_outputs.end()
                                   ? original.graph().nodes.at(static_cast<std::size_t>(nested->second)).name
                                   : layer;
      const std::string at = written.graph().find(node + "_activation") >= 0 ? node + "_activation" : node;
      const Tensor y = written.cut_at(at).forward(x.data.data(), x.batch());
      const double err = max_rel_error(y.data, ref.tensor(entry).data);
      EXPECT_LE(err, 1e-5) << "relative error " << err;
      ++checked;
    }
    EXPECT_GE(checked, 3);
  }
}

// Keras 3 `.keras` files (scripts/keras3_reference.py): every layer against Keras 3's outputs, and
// a Sequential holding a Functional backbone, cut at the backbone as with .h5 files.
TEST(KerasLayers, Keras3FilesMatchKeras) {
  const auto dir = vectors_dir() / "keras3";
  for (const std::string name : {"functional", "nested", "newer_layers"}) {
    SCOPED_TRACE(name);
    const Model model = load_model(dir / (name + ".keras"));
    VectorFile ref(dir / (name + ".json"));
    const Tensor x = ref.tensor(ref.meta.at("input"));
    double worst = 0.0;
    for (const auto& [layer, entry] : ref.meta.at("outputs").items()) {
      SCOPED_TRACE("layer " + layer);
      const Tensor y = model.cut_at(layer).forward(x.data.data(), x.batch());
      const double err = max_rel_error(y.data, ref.tensor(entry).data);
      EXPECT_LE(err, 1e-5) << "relative error " << err;
      worst = std::max(worst, err);
    }
    std::printf("keras3 %s: max relative error vs Keras 3 %.3g\n", name.c_str(), worst);
  }
  EXPECT_EQ(load_model(dir / "nested.keras").cut_at("backbone").output_shape(), (std::vector<int>{5}));
  // Not a zip, or a zip without the members: IoError naming the file.
  test::TempDir tmp;
  std::ofstream(tmp / "fake.keras") << "not a zip";
  try {
    load_model(tmp / "fake.keras");
    FAIL() << "a text file loaded as .keras";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("fake.keras"), std::string::npos) << e.what();
  }
}

// Keras 3 redefined hard_sigmoid as relu6(x + 3) / 6; stoker's is tf_keras' clip(0.2 x + 0.5, 0, 1),
// so a Keras 3 file using it is refused, naming the layer.
TEST(KerasLayers, Keras3HardSigmoidIsRefusedNamingTheLayer) {
  try {
    load_model(vectors_dir() / "keras3" / "hard_sigmoid.keras");
    FAIL() << "loaded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("act_hard_sigmoid"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Keras 3's hard_sigmoid"), std::string::npos) << e.what();
  }
}

TEST(KerasLayers, NestedModelNamesAreCutPoints) {
  Model model = load_model(vectors_dir() / "layers" / "nested.h5");
  EXPECT_EQ(model.cut_at("backbone").output_shape(), (std::vector<int>{4}));
  EXPECT_EQ(model.cut_at("inner_model").output_shape(), (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(model.output_shape(), (std::vector<int>{2}));
  EXPECT_THROW(model.cut_at("no_such_layer"), InvalidArgument);
}

}  // namespace
}  // namespace stoker::trainer
