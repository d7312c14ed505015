// The JSON the command prints or writes (--json reports, history.json) as text. A name that is not
// UTF-8 (a file named in another encoding) has those bytes written as U+FFFD, since JSON holds UTF-8
// only: the report is never lost to one such name.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace stoker::app {

inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace stoker::app
