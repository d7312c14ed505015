// Internal: libhdf5 (Debian 12's 1.10) trusts what a damaged file says in places stoker cannot
// check before it reads (fuzzing found a global heap ID's index taken as given, a failed string
// conversion freeing what it did not allocate), and a crafted model file can crash it. So a model
// file's HDF5 read runs once in a child process first: when the child dies (a signal, a
// sanitizer's report, an abort) or runs past its time, the file is refused with an IoError naming
// it; otherwise the same read in this process cannot crash either (the same code on the same
// bytes). The child only reads (no threads, no CUDA, no Python); its output goes nowhere.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>

namespace stoker::trainer::detail {

// stoker's libhdf5 calls one at a time, so that no fork happens while another thread is inside
// libhdf5 (the child would inherit its locks held).
std::mutex& hdf5_mutex();

// Runs `read` in a child of fork(), holding hdf5_mutex meanwhile. Returns when it ended normally,
// whether it read the file or threw: the read in this process then reports what it reports.
// IoError "<where>: ..." when the child crashed, or ran longer than `limit` (then it is killed).
void check_read_in_child(const std::string& where, const std::function<void()>& read,
                         std::chrono::seconds limit = std::chrono::seconds(300));

}  // namespace stoker::trainer::detail
