// Helpers shared by every test suite: temporary folders, generated images, the shared data path.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

namespace stoker::test {

// A fresh directory under the system temp folder, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A full disk, as root sees it too: while alive, no file this process writes may grow past
// `bytes` (RLIMIT_FSIZE); a write past it fails with EFBIG instead of raising SIGXFSZ, which is
// ignored meanwhile. Restores both on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(std::uint64_t bytes);
  ~FileSizeLimit();
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  std::uint64_t soft_ = 0;
  void (*handler_)(int) = nullptr;
};

// ../shared/data (or $STOKER_SHARED_DATA) when it exists.
std::optional<std::filesystem::path> shared_data_dir();

// The source tree the tests were built from, or $STOKER_SOURCE_DIR (a build carried to another
// machine: scripts/gpu_check.sh).
std::filesystem::path source_dir();

// A deterministic RGB test pattern: smooth gradients plus a few sharp edges.
cv::Mat make_pattern_rgb(int height, int width, int variant = 0);

// Pixels as JPEG bytes via TurboJPEG: pixel_format TJPF_*, chroma subsampling TJSAMP_*.
std::vector<std::uint8_t> encode_jpeg(const cv::Mat& img, int pixel_format, int subsampling, int quality = 95,
                                      bool progressive = false);
// Writes RGB pixels (cv::Mat CV_8UC3 in RGB order) as a JPEG via TurboJPEG.
void write_jpeg(const std::filesystem::path& file, const cv::Mat& rgb, int quality = 95);
// Writes a grayscale JPEG (CV_8UC1).
void write_gray_jpeg(const std::filesystem::path& file, const cv::Mat& gray, int quality = 95);
// Writes a CMYK JPEG from a CV_8UC4 image holding (Adobe-inverted) C, M, Y, K.
void write_cmyk_jpeg(const std::filesystem::path& file, const cv::Mat& cmyk, int quality = 95);
// Writes RGB pixels as PNG / BMP through OpenCV.
void write_png(const std::filesystem::path& file, const cv::Mat& rgb);
void write_bmp(const std::filesystem::path& file, const cv::Mat& rgb);

// A shell command's exit code (-1 when it did not exit normally) and its stdout and stderr together.
struct CommandResult {
  int exit_code = -1;
  std::string out;
};
CommandResult run_command(const std::string& shell_command);

// Sets environment variables for one test and restores them when it ends.
class Env {
 public:
  void set(const char* name, const char* value);  // value null: unset
  ~Env();

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::vector<std::uint8_t> read_bytes(const std::filesystem::path& file);
// A file's bytes as text ("" when it cannot be read: a log not written yet, a process gone).
std::string read_text(const std::filesystem::path& file);

// A shell command started in the background in a process group of its own, its stdout and stderr
// into `log`. With "exec " in front the command is the child itself: a signal sent to the pid
// reaches it.
pid_t start_command(const std::string& shell_command, const std::filesystem::path& log);
// The background command's exit status, or -signal when a signal ended it.
int wait_for(pid_t pid);
// The same once it ends within `limit`; nullopt while it still runs.
std::optional<int> wait_for(pid_t pid, std::chrono::duration<double> limit);
void write_bytes(const std::filesystem::path& file, const std::vector<std::uint8_t>& bytes);

}  // namespace stoker::test
