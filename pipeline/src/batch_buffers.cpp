#include "batch_buffers.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "stoker/core/error.hpp"

namespace stoker::detail {
namespace {

// a * b, or false when it does not fit.
bool multiply(std::size_t a, std::size_t b, std::size_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool add(std::size_t a, std::size_t b, std::size_t& out) { return !__builtin_add_overflow(a, b, &out); }

std::string gib(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// "slots batches (prefetch P + 1) of B samples (batch_size B) x HxWxC dtype"
std::string what_was_asked(const BatchRequest& r, int capacity) {
  std::string s = std::to_string(r.slots) + " batches (prefetch " + std::to_string(r.slots - 1) + " + 1) of " +
                  std::to_string(capacity) + " samples (batch_size " + std::to_string(r.batch_size);
  if (capacity < r.batch_size) s += ", this rank's " + std::to_string(r.samples) + " samples per epoch";
  return s + ") x " + std::to_string(r.shape.height) + "x" + std::to_string(r.shape.width) + "x" +
         std::to_string(r.shape.channels) + " " + to_string(r.shape.dtype);
}

}  // namespace

BatchBuffers plan_batch_buffers(const BatchRequest& r, std::uint64_t memory_limit) {
  BatchBuffers b;
  b.capacity = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(r.batch_size), r.samples));
  const auto capacity = static_cast<std::size_t>(b.capacity);
  std::size_t sample = 0, pixels = 0, rounded = 0, bookkeeping = 0, per_slot = 0;
  bool fits = multiply(static_cast<std::size_t>(r.shape.height), static_cast<std::size_t>(r.shape.width), sample) &&
              multiply(sample, static_cast<std::size_t>(r.shape.channels), sample) &&
              multiply(sample, dtype_size(r.shape.dtype), sample) && multiply(sample, capacity, pixels) &&
              add(pixels, r.page - 1, rounded);
  if (fits) {
    b.slot_bytes = rounded / r.page * r.page;
    fits = multiply(b.slot_bytes, r.slots, b.pixel_bytes) && multiply(r.per_sample, capacity, bookkeeping) &&
           add(b.slot_bytes, bookkeeping, per_slot) && add(per_slot, r.per_batch, per_slot) &&
           multiply(per_slot, r.slots, b.total_bytes);
  }
  if (!fits) {
    throw InvalidArgument("the batch buffers for " + what_was_asked(r, b.capacity) +
                          " would take more bytes than 64 bits count; lower batch_size, prefetch or the image size");
  }
  if (b.total_bytes > memory_limit) {
    throw BadAlloc("the batch buffers for " + what_was_asked(r, b.capacity) + " would take " +
                   std::to_string(b.total_bytes) + " bytes (" + gib(static_cast<double>(b.total_bytes)) +
                   "), more than the " + std::to_string(memory_limit) + " bytes (" +
                   gib(static_cast<double>(memory_limit)) +
                   ") of memory this process may use; lower batch_size, prefetch or the image size");
  }
  return b;
}

std::uint64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  std::uint64_t limit =
      pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : UINT64_MAX;
  // cgroup v2's limit: a number of bytes, or "max"; v1's: a number (near 2^63 when unlimited).
  for (const char* file : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(file);
    std::uint64_t bytes = 0;
    if (in >> bytes && bytes > 0) limit = std::min(limit, bytes);
  }
  return limit;
}

}  // namespace stoker::detail
