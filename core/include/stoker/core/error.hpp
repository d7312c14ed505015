// Typed exceptions used by every part of stoker. A library that lives inside someone's training
// job reports errors to its caller; it never aborts the process.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace stoker {

// Base of everything stoker throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An option or argument with a value that cannot work; the message names the parameter and the value.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A dataset that cannot be used: empty, a class folder without images, a malformed CSV.
class DatasetError : public Error {
 public:
  using Error::Error;
};

// One sample could not be read or decoded. Carries the file and the reason separately.
class DecodeError : public Error {
 public:
  DecodeError(std::string path, std::string reason)
      : Error(path + ": " + reason), path_(std::move(path)), reason_(std::move(reason)) {}
  const std::string& path() const noexcept { return path_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string path_;
  std::string reason_;
};

// A file that stoker itself reads or writes (model, cache file, config) failed.
class IoError : public Error {
 public:
  using Error::Error;
};

// A CUDA runtime or driver call failed; carries the numeric error code.
class CudaError : public Error {
 public:
  CudaError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// An allocation (host, pinned or device) failed; the message says how many bytes and where.
class BadAlloc : public Error {
 public:
  using Error::Error;
};

}  // namespace stoker
