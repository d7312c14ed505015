#include "test_support.hpp"

#include <turbojpeg.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

namespace stoker::test {
namespace fs = std::filesystem;

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  path_ = fs::temp_directory_path() /
          ("stoker-test-" + std::to_string(::getpid()) + "-" + std::to_string(stamp) + "-" + std::to_string(counter++));
  fs::create_directories(path_);
}

FileSizeLimit::FileSizeLimit(std::uint64_t bytes) {
  rlimit r{};
  if (::getrlimit(RLIMIT_FSIZE, &r) != 0) throw std::runtime_error("getrlimit(RLIMIT_FSIZE) failed");
  soft_ = r.rlim_cur;
  handler_ = std::signal(SIGXFSZ, SIG_IGN);
  r.rlim_cur = bytes;
  if (::setrlimit(RLIMIT_FSIZE, &r) != 0) throw std::runtime_error("setrlimit(RLIMIT_FSIZE) failed");
}

FileSizeLimit::~FileSizeLimit() {
  rlimit r{};
  ::getrlimit(RLIMIT_FSIZE, &r);
  r.rlim_cur = soft_;
  ::setrlimit(RLIMIT_FSIZE, &r);
  std::signal(SIGXFSZ, handler_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(path_, ec);
}

std::optional<fs::path> shared_data_dir() {
  fs::path dir = STOKER_SHARED_DATA_DEFAULT;
  if (const char* env = std::getenv("STOKER_SHARED_DATA")) dir = env;
  if (fs::is_directory(dir)) return dir;
  return std::nullopt;
}

fs::path source_dir() {
  const char* env = std::getenv("STOKER_SOURCE_DIR");
  return env && *env ? fs::path(env) : fs::path(STOKER_SOURCE_DIR);
}

cv::Mat make_pattern_rgb(int height, int width, int variant) {
  cv::Mat img(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      auto& px = img.at<cv::Vec3b>(y, x);
      px[0] = static_cast<std::uint8_t>((x * 255) / std::max(1, width - 1));
      px[1] = static_cast<std::uint8_t>((y * 255) / std::max(1, height - 1));
      px[2] = static_cast<std::uint8_t>(((x / 8 + y / 8 + variant) % 2) ? 200 : 40);
    }
  }
  return img;
}

std::vector<std::uint8_t> encode_jpeg(const cv::Mat& img, int pixel_format, int subsampling, int quality,
                                      bool progressive) {
  tjhandle handle = tjInitCompress();
  if (!handle) throw std::runtime_error("tjInitCompress failed");
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const cv::Mat cont = img.isContinuous() ? img : img.clone();
  const int rc = tjCompress2(handle, cont.data, cont.cols, 0, cont.rows, pixel_format, &out, &size, subsampling,
                             quality, progressive ? TJFLAG_PROGRESSIVE : 0);
  if (rc != 0) {
    std::string msg = tjGetErrorStr2(handle);
    tjDestroy(handle);
    throw std::runtime_error("tjCompress2: " + msg);
  }
  std::vector<std::uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

void write_jpeg(const fs::path& file, const cv::Mat& rgb, int quality) {
  write_bytes(file, encode_jpeg(rgb, TJPF_RGB, TJSAMP_420, quality));
}
void write_gray_jpeg(const fs::path& file, const cv::Mat& gray, int quality) {
  write_bytes(file, encode_jpeg(gray, TJPF_GRAY, TJSAMP_GRAY, quality));
}
void write_cmyk_jpeg(const fs::path& file, const cv::Mat& cmyk, int quality) {
  write_bytes(file, encode_jpeg(cmyk, TJPF_CMYK, TJSAMP_444, quality));
}
void write_png(const fs::path& file, const cv::Mat& rgb) {
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  if (!cv::imwrite(file.string(), bgr)) throw std::runtime_error("imwrite failed: " + file.string());
}
void write_bmp(const fs::path& file, const cv::Mat& rgb) { write_png(file, rgb); }

std::vector<std::uint8_t> read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

pid_t start_command(const std::string& shell_command, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const std::string cmd = shell_command + " > " + log.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

namespace {
int exit_status(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1000;
}
}  // namespace

int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return exit_status(status);
}

std::optional<int> wait_for(pid_t pid, std::chrono::duration<double> limit) {
  for (const auto end = std::chrono::steady_clock::now() + limit;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return exit_status(status);
    if (std::chrono::steady_clock::now() > end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void write_bytes(const fs::path& file, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

CommandResult run_command(const std::string& shell_command) {
  CommandResult r;
  std::FILE* p = ::popen((shell_command + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void Env::set(const char* name, const char* value) {
  const char* old = std::getenv(name);
  saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
  if (value) {
    ::setenv(name, value, 1);
  } else {
    ::unsetenv(name);
  }
}

Env::~Env() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second) {
      ::setenv(it->first.c_str(), it->second->c_str(), 1);
    } else {
      ::unsetenv(it->first.c_str());
    }
  }
}

}  // namespace stoker::test
