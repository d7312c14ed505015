#include "stoker/core/image.hpp"

namespace stoker {

const char* to_string(DType t) noexcept {
  switch (t) {
    case DType::U8: return "uint8";
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
  }
  return "?";
}

const char* to_string(Layout l) noexcept { return l == Layout::NHWC ? "NHWC" : "NCHW"; }

}  // namespace stoker
