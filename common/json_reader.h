// The JSON text reader behind JsonObject::Parse (json.h); not for direct use.
#pragma once

#include <string_view>

#include "common/json.h"
#include "mitra/common/status.h"

namespace mitra::detail {

// One JSON object from `text`: scalars become JsonValues, nested arrays and objects are
// validated and kept as raw text (at most 64 levels deep). InvalidArgument with the byte
// offset and what was expected otherwise.
Result<JsonObject> ReadJsonObject(std::string_view text);

}  // namespace mitra::detail
