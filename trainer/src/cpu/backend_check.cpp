// relative_error() and relative_error_to_cpu(): a backend measured against the CPU reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <stoker/core/error.hpp>
#include <stoker/trainer/backend.hpp>

namespace stoker::trainer {
namespace {

// Per sample a few oriented gratings (image-like structure, so activations are not all noise)
// plus uniform noise, clipped to [-1, 1].
std::vector<float> test_inputs(const std::vector<int>& hwc, int samples, std::uint64_t seed) {
  const int h = hwc.at(0), w = hwc.at(1), c = hwc.at(2);
  std::vector<float> x(static_cast<std::size_t>(samples) * h * w * c);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::size_t i = 0;
  for (int n = 0; n < samples; ++n) {
    const float fy = 0.02f + 0.2f * std::abs(u(rng)), fx = 0.02f + 0.2f * std::abs(u(rng)), phase = 3.0f * u(rng);
    for (int y = 0; y < h; ++y)
      for (int xx = 0; xx < w; ++xx)
        for (int ch = 0; ch < c; ++ch) {
          const float v = 0.6f * std::sin(fy * y + fx * xx + phase + 2.1f * ch) + 0.4f * u(rng);
          x[i++] = std::clamp(v, -1.0f, 1.0f);
        }
  }
  return x;
}

}  // namespace

double relative_error(std::span<const float> got, std::span<const float> ref) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (got.size() != ref.size()) return inf;
  double scale = 1e-6, err = 0;
  for (float v : ref)
    if (std::isfinite(v)) scale = std::max(scale, static_cast<double>(std::abs(v)));
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isfinite(got[i]) != std::isfinite(ref[i])) return inf;
    if (std::isfinite(got[i])) err = std::max(err, std::abs(static_cast<double>(got[i]) - ref[i]));
  }
  return err / scale;
}

double relative_error_to_cpu(const Graph& graph, const Backend& candidate, int samples, std::uint64_t seed) {
  if (graph.inputs.size() != 1) throw InvalidArgument("relative_error_to_cpu: the graph must have one input");
  if (samples < 1) throw InvalidArgument("relative_error_to_cpu: samples must be >= 1");
  const std::vector<int>& hwc = graph.nodes.at(static_cast<std::size_t>(graph.inputs[0])).out_shape;
  const std::vector<float> x = test_inputs(hwc, samples, seed);
  const std::vector<Tensor> ref = make_cpu_backend(graph)->forward(x.data(), samples);
  const std::vector<Tensor> got = candidate.forward(x.data(), samples);

  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t k = 0; k < ref.size(); ++k) {
    if (got[k].shape != ref[k].shape) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, relative_error(got[k].data, ref[k].data));
  }
  return worst;
}

}  // namespace stoker::trainer
