#include "contract/worker_messages.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace mitra::contract {
namespace {

// The counts a record means nothing without. JSON numbers are doubles: a whole number is one
// that converts back unchanged.
Status CheckCount(const JsonObject& record, const char* event, const char* field, double most) {
  const std::optional<double> n = record.GetNumber(field);
  if (n && *n >= 1 && *n <= most && *n == std::floor(*n)) return Status::Ok();
  return Status::InvalidArgument(std::string("a `") + event + "` record's \"" + field +
                                 "\" must be a whole number from 1 to " +
                                 std::to_string(static_cast<int64_t>(most)));
}

Status CheckCounts(std::string_view event, const JsonObject& record) {
  if (event == message::Step::kEvent) {
    return CheckCount(record, message::Step::kEvent, "step", 9e15);
  }
  if (event == message::Describe::kEvent) {
    return CheckCount(record, message::Describe::kEvent, "segments", 1e6);
  }
  return Status::Ok();
}

// The fields `Message` names, listed once per kind.
template <class Message>
const std::vector<std::string_view>& NamesOf() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    Message message;
    Message::Fields(message, [&out](const char* key, auto&) { out.push_back(key); });
    return out;
  }();
  return names;
}

bool Holds(const std::vector<std::string_view>& names, std::string_view key) {
  return std::find(names.begin(), names.end(), key) != names.end();
}

// `record` read as a `Message`, and as its `more`: the fields the kind does not name, "event"
// aside, and those it names but could not read (null, a NaN the worker could write no other
// way; another type), so that they pass through as they came. Allocates for `more` only (a
// heartbeat's every record comes through here).
template <class Message>
ReadMessage Read(const JsonObject& record) {
  Message message;
  std::vector<std::string_view> unread;  // rare: empty, it holds no memory
  Message::Fields(message, [&](const char* key, auto& value) {
    if (record.Has(key) && !fields::detail::Get(record, key, &value)) unread.push_back(key);
  });
  JsonObject more;
  const std::vector<std::string_view>& named = NamesOf<Message>();
  for (const auto& [key, value] : record.fields()) {
    if (key != "event" && (!Holds(named, key) || Holds(unread, key))) more.Set(key, value);
  }
  return {std::move(message), std::move(more)};
}

// The alternative of WorkerMessage named `event`, from index I on (Unknown, the last, names
// none).
template <size_t I = 0>
ReadMessage Decode(std::string_view event, const JsonObject& record) {
  if constexpr (I + 1 < std::variant_size_v<WorkerMessage>) {
    using Message = std::variant_alternative_t<I, WorkerMessage>;
    if (event == Message::kEvent) return Read<Message>(record);
    return Decode<I + 1>(event, record);
  } else {
    JsonObject rest = record;
    rest.Erase("event");
    return {message::Unknown{std::string(event)}, std::move(rest)};
  }
}

}  // namespace

Result<ReadMessage> ParseWorkerMessage(std::string_view json) {
  Result<JsonObject> record = JsonObject::Parse(json);
  if (!record.ok()) return record.status();
  const std::optional<std::string> event = record->GetString("event");
  if (!event) return Status::InvalidArgument("a record without a string \"event\"");
  if (Status counts = CheckCounts(*event, *record); !counts.ok()) return counts;
  return Decode(*event, *record);
}

std::string_view EventOf(const WorkerMessage& message) {
  return std::visit(
      [](const auto& m) -> std::string_view {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, message::Unknown>) {
          return m.event;
        } else {
          return m.kEvent;
        }
      },
      message);
}

}  // namespace mitra::contract
