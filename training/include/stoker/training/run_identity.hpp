// "Is this the same run?": which settings define a training run, so that a resume must repeat
// them, and which may change when a run is resumed. One table (run_identity.cpp) answers for the
// library, which records the defining settings in each checkpoint and refuses a resume whose
// settings differ, naming the first that does, and for `stoker train --resume`, which takes the
// recorded settings and lets only the flags that may change be given again.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace stoker::training {

struct RunSetting {
  const char* name;   // in the checkpoint's settings ("learning_rate"), or the flag's when not recorded
  const char* flags;  // the `stoker train` flags that set it, without "--", separated by spaces; "" for none
  bool may_change;    // a resume may give it another value (then it is not recorded)
};

// Every setting the table knows, defining ones first.
std::span<const RunSetting> run_identity();

// Whether `stoker train --resume` may be given `flag` (without "--") with another value.
bool may_change_on_resume(std::string_view flag);
// Those flags for a message: "--epochs, --threads, ... and --fine-tune-epochs".
std::string flags_that_may_change_on_resume();
// The flags of the defining setting `name` for a message ("--learning-rate"); empty when none.
std::string flags_of_setting(std::string_view name);

}  // namespace stoker::training
