// Internal: libhdf5 (Debian 12's 1.10) trusts what a damaged file says in places stoker cannot
// check before it reads (fuzzing found a global heap ID's index taken as given, a failed string
// conversion freeing what it did not allocate), and a crafted model file can crash it. So a model
// file's HDF5 read runs once in a child process first: when the child dies (a signal, a
// sanitizer's report, an abort) or runs past its time, the file is refused with an IoError naming
// it; otherwise the same read in this process cannot crash either (the same code on the same
// bytes). The child only reads (no threads, no CUDA, no Python); its output goes nowhere. Its new
// allocations are capped (kReadMemoryBase + kReadMemoryPerFileByte x the file's size): libhdf5
// allocates what a damaged file declares, and a read that needs more is refused. A read that
// fails in the child is not repeated here: its error is thrown as the child's read threw it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>

namespace stoker::trainer::detail {

// stoker's libhdf5 calls one at a time, so that no fork happens while another thread is inside
// libhdf5 (the child would inherit its locks held).
std::mutex& hdf5_mutex();

// The memory the child may allocate to read a file (a Keras file's weights are read once, and
// libhdf5 keeps little beside them).
inline constexpr std::uint64_t kReadMemoryBase = std::uint64_t{1} << 30;
inline constexpr std::uint64_t kReadMemoryPerFileByte = 8;

// Runs `read` (of `file`) in a child of fork(), holding hdf5_mutex meanwhile. Returns when the
// child read the file. Throws what the read threw in the child (its type and message, as
// rethrow_as_load_error gives them), IoError "<file>: ..." when it needed more memory than
// allowed, crashed, or ran longer than `limit` (then it is killed).
void check_read_in_child(const std::filesystem::path& file, const std::function<void()>& read,
                         std::chrono::seconds limit = std::chrono::seconds(300));

}  // namespace stoker::trainer::detail
