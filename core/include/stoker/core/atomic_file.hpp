// Files that are either wholly the old version or wholly the new one, whenever the process dies
// or the disk fills: every file stoker writes (checkpoints, the model folder, history and charts,
// shards, classes.txt, the shard index) goes through here.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace stoker {

// Writes `bytes` to a temporary file beside `file`, flushes it to the disk (fsync), renames it
// over `file` and syncs the folder. IoError naming the file and the reason when any step fails
// (the temporary file is removed; `file` keeps its old content). A `file` that is a device or a
// pipe (/dev/stdout, a FIFO) is written in place, each write checked.
void write_file_atomically(const std::filesystem::path& file, std::string_view bytes);

// Whether `file` exists and is neither a regular file nor a folder (a device, a pipe, a socket):
// such a target is written in place, not replaced by a renamed temporary.
bool is_stream_target(const std::filesystem::path& file);

// The same for a file another library writes by name (HDF5): `write` creates the temporary path
// it is given; it is then synced, renamed over `file` and the folder synced. What `write` throws
// propagates (the temporary file is removed).
void replace_file_atomically(const std::filesystem::path& file,
                             const std::function<void(const std::filesystem::path& tmp)>& write);

// The pieces of the two above, for a file written bit by bit (a tar shard): the temporary name
// beside `file` to create and write, then commit_file() to sync it and rename it over `file`
// (IoError naming `file` when a step fails; the temporary is removed). A writer killed before
// the commit leaves only the temporary, never a file under `file`'s name.
std::filesystem::path temporary_path(const std::filesystem::path& file);
void commit_file(const std::filesystem::path& tmp, const std::filesystem::path& file);
// Whether `name` is a temporary temporary_path() made for a file called `target` (a name that a
// killed writer left behind).
bool is_temporary_of(const std::string& name, const std::string& target);

// Before replacing `file` with a file of a kind recognised by its first bytes (`magic`): IoError
// when `file` exists, is not empty and does not begin with `magic` (nor is a cut copy of it). What
// stoker writes never replaces a file it did not write; the message names the file, says what it
// was about to write (`kind`: "shard index") and that the file is left as it is.
void refuse_foreign_file(const std::filesystem::path& file, std::string_view magic, const std::string& kind);

// Whether `file` begins with `magic` (false when it cannot be read).
bool file_starts_with(const std::filesystem::path& file, std::string_view magic);

// The whole file. IoError naming it when it cannot be opened or read.
std::string read_whole_file(const std::filesystem::path& file);

}  // namespace stoker
