// A training run's --out folder told apart from what else is there: the files stoker writes (the
// model folder, model_folder.hpp; the checkpoint files, checkpoint.hpp; what `stoker train` adds:
// train_settings.json, history.json, metrics.png, throughput.png; temporaries a killed writer
// left) and the user's own files, which stoker never removes or replaces.
//
//   RunFolder f = inspect_run_folder("out/run1");
//   if (!f.run_files.empty()) ...  // an earlier run: resume it, choose another folder, or
//   remove_run_files(f);           // replace it (the user's files stay)
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace stoker::training {

// The files `stoker train` adds to the library's (the command writes them).
inline constexpr const char* kRunSettingsFile = "train_settings.json";
inline constexpr const char* kHistoryFile = "history.json";
inline constexpr const char* kMetricsChart = "metrics.png";
inline constexpr const char* kThroughputChart = "throughput.png";

struct RunFolder {
  std::filesystem::path dir;
  // Files of a stoker run, recognised by name and by content (magic, HDF5 or PNG signature, the
  // JSON's own fields), and temporaries beside them (NAME.tmp.PID, NAME.partial).
  std::vector<std::filesystem::path> run_files;
  // Files named as a run's but of another kind (a user's model.h5 that is not HDF5, a
  // history.json of another program): a run would replace them, so they stop it.
  std::vector<std::filesystem::path> foreign_run_names;
  // Everything else: the user's files and folders, never touched.
  std::vector<std::filesystem::path> other_files;

  bool empty() const { return run_files.empty() && foreign_run_names.empty() && other_files.empty(); }
};

// What `dir` holds (all empty when it does not exist). IoError when it is not a folder.
RunFolder inspect_run_folder(const std::filesystem::path& dir);

// Removes `folder.run_files`, nothing else. IoError naming a file that cannot be removed.
void remove_run_files(const RunFolder& folder);

// Up to `most` names of `files`, comma-separated, "and N more" after.
std::string list_names(const std::vector<std::filesystem::path>& files, std::size_t most = 6);

// Whether `path` is `dir` or lies inside it (after resolving symbolic links, `..` and relative
// parts as far as the paths exist).
bool is_inside(const std::filesystem::path& path, const std::filesystem::path& dir);

// A file name a checkpoint may name inside its run's folder: one plain name, no folder, no `..`.
bool is_plain_file_name(const std::string& name);

// One run at a time in a folder: an advisory lock (flock) on the folder itself, held while the
// object lives and released by the system when the process ends, however it ends (a kill -9 leaves
// no stale lock, and no file is added to the folder). The folder is created when missing.
// IoError naming the folder when another run (another process, or another lock in this one) holds it.
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::filesystem::path& dir);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace stoker::training
