// Where a loader's batch buffers live. The default is page-aligned host memory (pipeline/); the
// CUDA runtime's PinnedHostAllocator (cuda.hpp) supplies page-locked memory for the GPU feed.
#pragma once

#include <cstddef>

namespace stoker {

// Called only while a loader is constructed and destroyed, never per batch.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  virtual void* allocate(std::size_t bytes) = 0;  // throws BadAlloc
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  virtual const char* name() const noexcept = 0;
};

}  // namespace stoker
