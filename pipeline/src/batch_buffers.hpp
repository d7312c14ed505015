// How much memory a loader's batch buffers take, said before any of it is allocated: each batch is
// as large as a batch of this rank can be (batch_size, or the samples of its epoch when fewer), and
// a request whose bytes overflow or exceed the machine's memory is refused with the settings and
// the bytes, instead of reserving gigabytes or failing inside the allocator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stoker/core/image.hpp"

namespace stoker::detail {

struct BatchBuffers {
  int capacity = 0;             // samples a batch holds: min(batch_size, samples per epoch)
  std::size_t slot_bytes = 0;   // the pixels of one batch, rounded up to whole pages
  std::size_t pixel_bytes = 0;  // slot_bytes x slots: the one block of batch memory
  std::size_t total_bytes = 0;  // pixel_bytes and every batch's bookkeeping
};

struct BatchRequest {
  SampleShape shape;           // one sample, as the transform writes it
  int batch_size = 0;          // >= 1
  std::size_t samples = 0;     // what this rank delivers in an epoch (>= 1)
  std::size_t slots = 0;       // batches held at once: prefetch + 1
  std::size_t per_sample = 0;  // bookkeeping bytes per sample of a batch (labels, ids, ...)
  std::size_t per_batch = 0;   // bookkeeping bytes per batch
  std::size_t page = 4096;     // a batch's pixels start on a page
};

// The buffers `request` needs. Throws InvalidArgument when the bytes do not fit in 64 bits, and
// BadAlloc when they exceed `memory_limit` (host_memory_bytes()), naming batch_size, prefetch,
// the sample's shape and the bytes either way.
BatchBuffers plan_batch_buffers(const BatchRequest& request, std::uint64_t memory_limit);

// The memory this process may use: the machine's physical memory, or its cgroup's limit when
// lower (a container).
std::uint64_t host_memory_bytes();

}  // namespace stoker::detail
