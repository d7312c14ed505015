#include "data_parallel.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "stoker/core/error.hpp"
#include "stoker/pipeline/plan.hpp"

namespace stoker::training {
namespace {

template <class T>
void put(std::string& out, const T* p, std::size_t n) {
  out.append(reinterpret_cast<const char*>(p), sizeof(T) * n);
}

template <class T>
void take(const std::string& in, std::size_t& at, T* p, std::size_t n) {
  if (in.size() - at < sizeof(T) * n)
    throw Error("gather_features: a rank sent " + std::to_string(in.size()) + " bytes, fewer than it announced");
  std::memcpy(p, in.data() + at, sizeof(T) * n);
  at += sizeof(T) * n;
}

// Rows, their dimension and labels, ids, then the unreadable samples' indices.
std::string serialize(const Features& f) {
  std::string out;
  const std::int64_t head[3] = {f.n, f.dim, static_cast<std::int64_t>(f.skipped.size())};
  put(out, head, 3);
  put(out, f.x.data(), f.x.size());
  put(out, f.y.data(), f.y.size());
  put(out, f.ids.data(), f.ids.size());
  for (const SkippedSample& s : f.skipped) {
    const std::int64_t index = s.sample_id, length = static_cast<std::int64_t>(s.path.size());
    put(out, &index, 1);
    put(out, &length, 1);
    put(out, s.path.data(), s.path.size());
    const std::int64_t reason = static_cast<std::int64_t>(s.reason.size());
    put(out, &reason, 1);
    put(out, s.reason.data(), s.reason.size());
  }
  return out;
}

}  // namespace

Features gather_features(Collective& collective, Features local, const std::vector<std::uint32_t>& order) {
  if (collective.size() == 1) return local;
  const std::vector<std::string> all = collective.allgather(serialize(local));
  struct Rows {
    int n = 0, dim = 0;
    std::vector<float> x;
    std::vector<int> y;
    std::vector<std::int64_t> ids;
  };
  std::vector<Rows> ranks(all.size());
  std::vector<SkippedSample> skipped;
  std::unordered_map<std::int64_t, std::pair<std::size_t, int>> where;  // id -> (rank, row), first copy
  for (std::size_t r = 0; r < all.size(); ++r) {
    std::size_t at = 0;
    std::int64_t head[3];
    take(all[r], at, head, 3);
    Rows& rows = ranks[r];
    rows.n = static_cast<int>(head[0]);
    rows.dim = static_cast<int>(head[1]);
    if (rows.n > 0 && rows.dim != local.dim && local.n > 0)
      throw Error("gather_features: rank " + std::to_string(r) + " has features of " + std::to_string(rows.dim) +
                  " values, this rank " + std::to_string(local.dim));
    rows.x.resize(static_cast<std::size_t>(rows.n) * static_cast<std::size_t>(rows.dim));
    rows.y.resize(static_cast<std::size_t>(rows.n));
    rows.ids.resize(static_cast<std::size_t>(rows.n));
    take(all[r], at, rows.x.data(), rows.x.size());
    take(all[r], at, rows.y.data(), rows.y.size());
    take(all[r], at, rows.ids.data(), rows.ids.size());
    for (std::int64_t k = 0; k < head[2]; ++k) {
      SkippedSample s;
      std::int64_t index = 0, length = 0;
      take(all[r], at, &index, 1);
      take(all[r], at, &length, 1);
      s.sample_id = index;
      s.path.resize(static_cast<std::size_t>(length));
      take(all[r], at, s.path.data(), s.path.size());
      take(all[r], at, &length, 1);
      s.reason.resize(static_cast<std::size_t>(length));
      take(all[r], at, s.reason.data(), s.reason.size());
      skipped.push_back(std::move(s));
    }
    for (int i = 0; i < rows.n; ++i) where.try_emplace(rows.ids[static_cast<std::size_t>(i)], r, i);
  }
  Features out;
  out.dim = 0;
  for (const Rows& rows : ranks) out.dim = std::max(out.dim, rows.dim);
  out.times = local.times;
  for (const std::uint32_t id : order) {
    const auto it = where.find(static_cast<std::int64_t>(id));
    if (it == where.end()) continue;  // unreadable
    const Rows& rows = ranks[it->second.first];
    const auto row = static_cast<std::size_t>(it->second.second);
    const float* x = rows.x.data() + row * static_cast<std::size_t>(rows.dim);
    out.x.insert(out.x.end(), x, x + rows.dim);
    out.y.push_back(rows.y[row]);
    out.ids.push_back(static_cast<std::int64_t>(id));
    where.erase(it);
  }
  out.n = static_cast<int>(out.y.size());
  std::sort(skipped.begin(), skipped.end(),
            [](const SkippedSample& a, const SkippedSample& b) { return a.sample_id < b.sample_id; });
  skipped.erase(std::unique(skipped.begin(), skipped.end(),
                            [](const SkippedSample& a, const SkippedSample& b) { return a.sample_id == b.sample_id; }),
                skipped.end());
  out.skipped = std::move(skipped);
  return out;
}

std::vector<std::uint32_t> plan_order(std::size_t samples, std::uint64_t seed, std::uint64_t epoch, bool shuffle) {
  return epoch_plan(static_cast<std::uint32_t>(samples), seed, epoch, shuffle, Sharding{}).samples;
}

std::function<Features(Features, std::uint64_t)> gather_in_plan_order(Collective& collective, std::size_t samples,
                                                                      std::uint64_t seed, bool shuffle) {
  return [&collective, samples, seed, shuffle](Features local, std::uint64_t epoch) {
    return gather_features(collective, std::move(local), plan_order(samples, seed, epoch, shuffle));
  };
}

trainer::StepResult sum_step_over_ranks(
    Collective& collective, int m, int nb, const trainer::StepResult& local,
    const std::function<void(const std::function<void(std::vector<float>&)>&)>& for_each_gradient) {
  const double share = static_cast<double>(m) / nb;
  std::vector<float> flat;
  for_each_gradient([&](std::vector<float>& g) {
    for (const float v : g) flat.push_back(m > 0 ? static_cast<float>(v * share) : 0.0f);
  });
  double stats[2] = {m > 0 ? local.loss * m : 0.0, m > 0 ? static_cast<double>(local.correct) : 0.0};
  collective.allreduce_sum(std::span<float>(flat));
  collective.allreduce_sum(std::span<double>(stats, 2));
  std::size_t at = 0;
  for_each_gradient([&](std::vector<float>& g) {
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), g.size(), g.begin());
    at += g.size();
  });
  trainer::StepResult r;
  r.loss = stats[0] / nb;
  r.correct = static_cast<int>(std::lround(stats[1]));
  r.samples = nb;
  return r;
}

std::vector<int> rows_in_order(int n) {
  std::vector<int> order(static_cast<std::size_t>(std::max(n, 0)));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

void for_each_global_batch(const Features& values, const std::vector<int>& order, int batch_size,
                           const Collective* collective,
                           const std::function<void(const float* x, const int* y, int m, int nb)>& step) {
  const int n = values.n;
  const auto dim = static_cast<std::size_t>(values.dim);
  if (n <= 0 || batch_size <= 0)
    throw InvalidArgument("an epoch needs rows and a batch size > 0, received " + std::to_string(n) + " and " +
                          std::to_string(batch_size));
  const auto ranks = static_cast<std::int64_t>(collective ? collective->size() : 1);
  const auto rank = static_cast<std::int64_t>(collective ? collective->rank() : 0);
  std::vector<float> bx(static_cast<std::size_t>(batch_size) * dim);
  std::vector<int> by(static_cast<std::size_t>(batch_size));
  for (int start = 0; start < n; start += batch_size) {
    const int nb = std::min(batch_size, n - start);
    const int lo = static_cast<int>(nb * rank / ranks), m = static_cast<int>(nb * (rank + 1) / ranks) - lo;
    for (int b = 0; b < m; ++b) {
      const auto row = static_cast<std::size_t>(order[static_cast<std::size_t>(start + lo + b)]);
      std::copy_n(values.x.data() + row * dim, dim, bx.data() + static_cast<std::size_t>(b) * dim);
      by[static_cast<std::size_t>(b)] = values.y[row];
    }
    step(bx.data(), by.data(), m, nb);
  }
}

std::vector<RankDevice> gather_rank_devices(Collective& collective, const DeviceChoice& mine) {
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  const nlohmann::json record = {
      {"description", mine.description}, {"machine", host}, {"gpu", mine.cuda ? mine.index : -1}};
  std::vector<RankDevice> all;
  for (const std::string& text : collective.allgather(record.dump())) {
    const nlohmann::json j = nlohmann::json::parse(text);
    const int gpu = j.at("gpu").get<int>();
    all.push_back({j.at("description").get<std::string>(), j.at("machine").get<std::string>(),
                   gpu >= 0 ? std::optional<int>(gpu) : std::nullopt});
  }
  return all;
}

}  // namespace stoker::training
