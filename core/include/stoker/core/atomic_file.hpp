// Files that are either wholly the old version or wholly the new one, whenever the process dies:
// checkpoints, the head file, the features a resumed run reuses.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace stoker {

// Writes `bytes` to a temporary file beside `file`, flushes it to the disk (fsync), renames it
// over `file` and syncs the folder. IoError naming the file and the reason when any step fails
// (the temporary file is removed; `file` keeps its old content).
void write_file_atomically(const std::filesystem::path& file, std::string_view bytes);

// The same for a file another library writes by name (HDF5): `write` creates the temporary path
// it is given; it is then synced, renamed over `file` and the folder synced. What `write` throws
// propagates (the temporary file is removed).
void replace_file_atomically(const std::filesystem::path& file,
                             const std::function<void(const std::filesystem::path& tmp)>& write);

// The whole file. IoError naming it when it cannot be opened or read.
std::string read_whole_file(const std::filesystem::path& file);

}  // namespace stoker
