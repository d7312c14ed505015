// A read-only file mapping that another process may cut short (truncate in place) while it is in
// use. Touching a page past the new end raises SIGBUS, which would kill the process. A guarded
// mapping turns that into data: the signal handler maps a page of zeros over the one that faulted,
// the access goes on, and the mapping is marked damaged; its owner checks `damaged()` after using
// the bytes and reports the file, never the zeros.
#pragma once

#include <atomic>
#include <cstddef>

namespace stoker::detail {

class MappingGuard {
 public:
  MappingGuard() = default;
  MappingGuard(const void* begin, std::size_t size);  // guards [begin, begin + size)
  ~MappingGuard();                                    // before the mapping is unmapped
  MappingGuard(const MappingGuard&) = delete;
  MappingGuard& operator=(const MappingGuard&) = delete;

  // A page of the mapping was gone (the file shorter than when it was mapped) and read as zeros.
  bool damaged() const noexcept;
  bool guarded() const noexcept { return slot_ != nullptr; }

  struct Slot;  // one guarded range, as the signal handler reads it

 private:
  Slot* slot_ = nullptr;
};

}  // namespace stoker::detail
