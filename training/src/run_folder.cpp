#include "stoker/training/run_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "stoker/core/atomic_file.hpp"
#include "stoker/core/error.hpp"
#include "stoker/training/checkpoint.hpp"
#include "stoker/training/model_folder.hpp"

namespace stoker::training {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kHdf5("\x89HDF\r\n\x1a\n", 8);
constexpr std::string_view kPng("\x89PNG\r\n\x1a\n", 8);

enum class Kind { Hdf5, Png, Head, Checkpoint, Features, ModelJson, HistoryJson, SettingsJson };

// The file names a run writes and the kind each must be.
bool run_file_kind(const std::string& name, Kind& kind) {
  const std::pair<const char*, Kind> fixed[] = {{kClassifierFile, Kind::Hdf5},
                                                {kFineTunedBackboneFile, Kind::Hdf5},
                                                {"head.stkh", Kind::Head},
                                                {kCheckpointFile, Kind::Checkpoint},
                                                {kCheckpointFeaturesFile, Kind::Features},
                                                {"stoker_model.json", Kind::ModelJson},
                                                {kHistoryFile, Kind::HistoryJson},
                                                {kRunSettingsFile, Kind::SettingsJson},
                                                {kMetricsChart, Kind::Png},
                                                {kThroughputChart, Kind::Png}};
  for (const auto& [n, k] : fixed) {
    if (name == n) {
      kind = k;
      return true;
    }
  }
  // The fine-tuning checkpoints' backbones: checkpoint-backbone-E.h5, checkpoint-backbone-E-bB.h5.
  if (name.starts_with("checkpoint-backbone-") && name.ends_with(".h5")) {
    kind = Kind::Hdf5;
    return true;
  }
  return false;
}

bool json_with(const fs::path& file, const char* key, const char* value = nullptr) {
  std::ifstream in(file);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains(key)) return false;
  return !value || (j[key].is_string() && j[key].get<std::string>().starts_with(value));
}

bool is_of_kind(const fs::path& file, Kind kind) {
  switch (kind) {
    case Kind::Hdf5: return file_starts_with(file, kHdf5);
    case Kind::Png: return file_starts_with(file, kPng);
    case Kind::Head: return file_starts_with(file, "STKHEAD1");
    case Kind::Checkpoint: return file_starts_with(file, "STKCKPT1");
    case Kind::Features: return file_starts_with(file, "STKFEAT1");
    case Kind::ModelJson: return json_with(file, "format", "stoker model folder");
    case Kind::HistoryJson: return json_with(file, "epochs") || json_with(file, "best_epoch");
    case Kind::SettingsJson: return json_with(file, "format", "stoker-train-settings");
  }
  return false;
}

// A temporary a writer of a run file leaves when killed: NAME.tmp.PID (atomic_file.hpp) or
// NAME.partial (the fine-tuning checkpoints' backbones).
bool is_run_temporary(const std::string& name) {
  Kind kind;
  const std::size_t tmp = name.rfind(".tmp.");
  if (tmp != std::string::npos && run_file_kind(name.substr(0, tmp), kind) &&
      is_temporary_of(name, name.substr(0, tmp)))
    return true;
  return name.ends_with(".partial") && run_file_kind(name.substr(0, name.size() - 8), kind);
}

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : r;
}

}  // namespace

RunFolder inspect_run_folder(const fs::path& dir) {
  RunFolder f;
  f.dir = dir;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return f;
  if (!fs::is_directory(dir, ec)) throw IoError(dir.string() + ": exists and is not a folder");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    Kind kind;
    const bool file = entry.is_regular_file(ec);
    if (file && run_file_kind(name, kind)) {
      (is_of_kind(entry.path(), kind) ? f.run_files : f.foreign_run_names).push_back(entry.path());
    } else if (file && is_run_temporary(name)) {
      f.run_files.push_back(entry.path());
    } else {
      f.other_files.push_back(entry.path());
    }
  }
  for (auto* v : {&f.run_files, &f.foreign_run_names, &f.other_files}) std::sort(v->begin(), v->end());
  return f;
}

void remove_run_files(const RunFolder& folder) {
  for (const fs::path& file : folder.run_files) {
    std::error_code ec;
    fs::remove(file, ec);
    if (ec) throw IoError(file.string() + ": cannot remove: " + ec.message());
  }
}

std::string list_names(const std::vector<fs::path>& files, std::size_t most) {
  std::string out;
  for (std::size_t i = 0; i < files.size() && i < most; ++i) out += (i ? ", " : "") + files[i].filename().string();
  if (files.size() > most) out += " and " + std::to_string(files.size() - most) + " more";
  return out;
}

bool is_inside(const fs::path& path, const fs::path& dir) {
  const fs::path p = resolved(path), d = resolved(dir);
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty() && std::next(di) == d.end()) break;  // a trailing separator
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

RunFolderLock::RunFolderLock(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw IoError(dir.string() + ": cannot create the output folder");
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw IoError(dir.string() + ": cannot open the output folder (" + std::strerror(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int error = errno;
  ::close(fd_);
  if (error == EWOULDBLOCK)
    throw IoError(dir.string() +
                  ": another stoker train is running in this folder (it holds the folder's lock): wait for it to "
                  "end, or train into another --out");
  throw IoError(dir.string() + ": cannot lock the output folder (" + std::strerror(error) + ")");
}

RunFolderLock::~RunFolderLock() { ::close(fd_); }  // closing the descriptor releases the lock

}  // namespace stoker::training
