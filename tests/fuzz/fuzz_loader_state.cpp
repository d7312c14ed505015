// Fuzzes LoaderState::parse, the one line a checkpoint keeps of where a loader stands (read back
// by `stoker train --resume` and Loader.load_state_dict): arbitrary text is a state or an
// InvalidArgument, and a state it accepts writes back to text that parses to the same state.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <stoker/core/error.hpp>
#include <stoker/pipeline/loader.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  stoker::LoaderState state;
  try {
    state = stoker::LoaderState::parse(text);
  } catch (const stoker::InvalidArgument&) {
    return 0;
  }
  if (!(stoker::LoaderState::parse(state.to_string()) == state)) std::abort();
  return 0;
}
