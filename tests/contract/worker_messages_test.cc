// The workers' messages (contract/worker_messages.h): every kind reads back what it wrote, the
// docs' table lists every kind and every field of it, and reading is as lenient and as strict
// as the header says.
#include "contract/worker_messages.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include "tests/common/filled.h"

namespace mitra::contract {
namespace {

using testing::Filled;

// Every kind but Unknown, each once.
template <class F, size_t... I>
void ForEachKindAt(F&& f, std::index_sequence<I...>) {
  (f(std::variant_alternative_t<I, WorkerMessage>{}), ...);
}
template <class F>
void ForEachKind(F&& f) {
  ForEachKindAt(f, std::make_index_sequence<std::variant_size_v<WorkerMessage> - 1>());
}

TEST(WorkerMessages, EveryKindReadsBackWhatItWrote) {
  int kinds = 0;
  ForEachKind([&kinds](auto kind) {
    using Message = decltype(kind);
    ++kinds;
    const Message written = Filled<Message>();
    const std::string line = MessageLine(written);
    ASSERT_EQ(line.rfind(kMessagePrefix, 0), 0u);
    ASSERT_EQ(line.back(), '\n');
    const std::string json = line.substr(kMessagePrefix.size(), line.size() - 1 - kMessagePrefix.size());
    Result<ReadMessage> read = ParseWorkerMessage(json);
    ASSERT_TRUE(read.ok()) << Message::kEvent << ": " << read.status().message();
    ASSERT_TRUE(std::holds_alternative<Message>(read->message)) << Message::kEvent;
    EXPECT_EQ(EventOf(read->message), Message::kEvent);
    EXPECT_EQ(MessageJson(std::get<Message>(read->message)).ToJson(), json) << Message::kEvent;
    EXPECT_EQ(read->more.size(), 0u) << Message::kEvent << ": " << read->more.ToJson();
    EXPECT_EQ(MessageJson(written).size(), fields::FieldNames<Message>().size() + 1)
        << Message::kEvent << ": a field name is used twice";
  });
  EXPECT_EQ(kinds, 18);
}

TEST(WorkerMessages, EachKindHasItsOwnEvent) {
  std::set<std::string> events;
  ForEachKind([&events](auto kind) {
    EXPECT_TRUE(events.insert(decltype(kind)::kEvent).second) << decltype(kind)::kEvent;
  });
}

// ---- Reading -----------------------------------------------------------------------------------

TEST(WorkerMessages, AStepsNumberMustBeAWholeNumberFromOne) {
  for (const char* step : {"0", "-3", "1.5", "1e300", "\"7\"", "null"}) {
    Result<ReadMessage> read =
        ParseWorkerMessage(std::string(R"({"event":"step","loss":1,"step":)") + step + "}");
    ASSERT_FALSE(read.ok()) << step;
    EXPECT_EQ(read.status().message(),
              "a `step` record's \"step\" must be a whole number from 1 to 9000000000000000");
  }
  EXPECT_FALSE(ParseWorkerMessage(R"({"event":"step","loss":1})").ok());
  Result<ReadMessage> read = ParseWorkerMessage(R"({"event":"step","step":9e15})");
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(std::get<message::Step>(read->message).step, 9'000'000'000'000'000);
}

TEST(WorkerMessages, AProgramsSegmentsMustBeAWholeNumberFromOne) {
  EXPECT_FALSE(ParseWorkerMessage(R"({"event":"describe","segments":0})").ok());
  EXPECT_FALSE(ParseWorkerMessage(R"({"event":"describe","segments":2.5})").ok());
  EXPECT_FALSE(ParseWorkerMessage(R"({"event":"describe","segments":2e6})").ok());
  Result<ReadMessage> read = ParseWorkerMessage(R"({"event":"describe","segments":4})");
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(std::get<message::Describe>(read->message).segments, 4);
}

TEST(WorkerMessages, TextThatIsNoMessageIsAnErrorThatSaysWhy) {
  EXPECT_FALSE(ParseWorkerMessage(R"({"event":"step",)").ok());
  EXPECT_FALSE(ParseWorkerMessage("[1,2]").ok());
  Result<ReadMessage> no_event = ParseWorkerMessage(R"({"step":3})");
  ASSERT_FALSE(no_event.ok());
  EXPECT_EQ(no_event.status().message(), "a record without a string \"event\"");
  EXPECT_FALSE(ParseWorkerMessage(R"({"event":7})").ok());
}

TEST(WorkerMessages, AKindOfANewerWorkerIsUnknownWithItsFieldsKept) {
  Result<ReadMessage> read = ParseWorkerMessage(R"({"event":"gpu_clock","mhz":1980})");
  ASSERT_TRUE(read.ok());
  ASSERT_TRUE(std::holds_alternative<message::Unknown>(read->message));
  EXPECT_EQ(EventOf(read->message), "gpu_clock");
  EXPECT_EQ(read->more.ToJson(), R"({"mhz":1980})");
}

TEST(WorkerMessages, MissingFieldsKeepTheirDefaults) {
  Result<ReadMessage> read = ParseWorkerMessage(R"({"event":"ready","rank":2,"park":"yes"})");
  ASSERT_TRUE(read.ok());
  const auto& ready = std::get<message::Ready>(read->message);
  EXPECT_EQ(ready.rank, 2);
  EXPECT_FALSE(ready.park) << "a field of another type keeps its default";
  EXPECT_FALSE(ready.hold.has_value());
  EXPECT_TRUE(ready.Holds()) << "absent: the rank holds its stage's whole state";
}

TEST(WorkerMessages, FieldsTheKindDoesNotNameAndNullsAreKeptInOrder) {
  Result<ReadMessage> read = ParseWorkerMessage(
      R"({"event":"eval","step":10,"accuracy":0.75,"loss":0.5,"perplexity":1.6,"seconds":null})");
  ASSERT_TRUE(read.ok());
  const auto& eval = std::get<message::Eval>(read->message);
  EXPECT_EQ(eval.step, 10);
  EXPECT_EQ(eval.loss, 0.5);
  EXPECT_EQ(read->more.ToJson(), R"({"accuracy":0.75,"perplexity":1.6,"seconds":null})");
  // Written back: the kind's fields in their order, the null in its place, then the rest.
  EXPECT_EQ(MessageJson(eval, read->more).ToJson(),
            R"({"event":"eval","step":10,"samples":0,"loss":0.5,"seconds":null,)"
            R"("accuracy":0.75,"perplexity":1.6})");
}

// An optional of another type is not read (not made 0): a heartbeat's times that are no
// numbers are no times; the value passes through as it came.
TEST(WorkerMessages, AnOptionalOfAnotherTypeStaysEmptyAndPassesThrough) {
  Result<ReadMessage> read =
      ParseWorkerMessage(R"({"event":"heartbeat","rank":1,"steps":3,"compute_s":"x"})");
  ASSERT_TRUE(read.ok());
  const auto& beat = std::get<message::Heartbeat>(read->message);
  EXPECT_EQ(beat.steps, 3);
  EXPECT_FALSE(beat.compute_s.has_value());
  EXPECT_EQ(read->more.ToJson(), R"({"compute_s":"x"})");
  EXPECT_EQ(MessageJson(beat, read->more).ToJson(),
            R"({"event":"heartbeat","rank":1,"steps":3,"compute_s":"x"})");
}

TEST(WorkerMessages, ANullLossIsNoLoss) {
  Result<ReadMessage> read = ParseWorkerMessage(R"({"event":"step","step":2,"loss":null})");
  ASSERT_TRUE(read.ok());
  EXPECT_FALSE(std::get<message::Step>(read->message).loss.has_value());
  EXPECT_EQ(MessageFields(std::get<message::Step>(read->message), read->more).ToJson(),
            R"({"step":2,"loss":null,"samples":0,"step_time_s":0})");
}

TEST(WorkerMessages, AWorkerWritesANaNLossAsNull) {
  message::Step step;
  step.step = 1;
  step.loss = std::nan("");
  EXPECT_EQ(MessageLine(step), "@mitra {\"event\":\"step\",\"step\":1,\"loss\":null,\"samples\":0,"
                               "\"step_time_s\":0}\n");
}

// ---- The docs list every kind and every field ------------------------------------------------

std::string ReadDoc(const std::string& name) {
  std::ifstream in(std::string(MITRA_SOURCE_DIR) + "/docs/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The table of docs/worker-contract.md's "What a worker tells the manager": event -> the fields
// its fields' cell names, the backticked names outside parentheses (inside them are values and
// remarks: `reason` (`max_steps` or `signal`)).
std::map<std::string, std::set<std::string>> DocumentedKinds() {
  const std::string doc = ReadDoc("worker-contract.md");
  const size_t section = doc.find("\n## What a worker tells the manager\n");
  const size_t end = doc.find("\n## ", section + 1);
  std::istringstream in(doc.substr(section, end - section));
  std::map<std::string, std::set<std::string>> kinds;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0 || line.rfind("| `event` |", 0) == 0) continue;
    const size_t tick = line.find('`', 3);
    const size_t cell = line.find(" | ", tick);
    const std::string fields = line.substr(cell + 3, line.find(" | ", cell + 3) - cell - 3);
    std::set<std::string>& names = kinds[line.substr(3, tick - 3)];
    int depth = 0;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i] == '(') ++depth;
      if (fields[i] == ')') --depth;
      if (fields[i] != '`') continue;
      const size_t close = fields.find('`', i + 1);
      if (depth == 0) names.insert(fields.substr(i + 1, close - i - 1));
      i = close;
    }
  }
  return kinds;
}

template <class Message>
void ExpectDocumented(const std::map<std::string, std::set<std::string>>& kinds) {
  const auto row = kinds.find(Message::kEvent);
  ASSERT_NE(row, kinds.end()) << "the kind `" << Message::kEvent << "` is not in the docs";
  std::set<std::string> fields;
  for (const std::string& name : fields::FieldNames<Message>()) {
    fields.insert(name);
    EXPECT_TRUE(row->second.count(name))
        << Message::kEvent << ": the field `" << name << "` is not in the docs";
  }
  for (const std::string& name : row->second) {
    EXPECT_TRUE(fields.count(name))
        << Message::kEvent << ": the docs list `" << name << "`, which is no field of the kind";
  }
}

TEST(WorkerMessages, TheDocsListEveryKindAndEveryFieldOfItAndNoOther) {
  const std::map<std::string, std::set<std::string>> kinds = DocumentedKinds();
  std::set<std::string> known;
  ForEachKind([&](auto kind) {
    ExpectDocumented<decltype(kind)>(kinds);
    known.insert(decltype(kind)::kEvent);
  });
  for (const auto& [event, cell] : kinds) {
    EXPECT_TRUE(known.count(event)) << "the docs list `" << event << "`, which is no kind";
  }
}

// The guards: a kind with a field the docs do not list, or without one they list, fails the
// check.
struct ReadyAndMore : message::Ready {
  bool parks = false;
  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    message::Ready::Fields(r, f);
    f("parks", r.parks);
  }
};

struct ReadyWithoutStages {
  static constexpr const char* kEvent = "ready";
  int64_t rank = 0, replicas = 0, generation = 0;
  bool park = false, hold = false;
  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rank", r.rank), f("replicas", r.replicas), f("generation", r.generation);
    f("park", r.park), f("hold", r.hold);
  }
};

TEST(WorkerMessages, AFieldTheDocsDoNotListOrOneTheyListInVainFailsTheDocsCheck) {
  const std::map<std::string, std::set<std::string>> kinds = DocumentedKinds();
  EXPECT_NONFATAL_FAILURE(ExpectDocumented<ReadyAndMore>(kinds),
                          "ready: the field `parks` is not in the docs");
  EXPECT_NONFATAL_FAILURE(ExpectDocumented<ReadyWithoutStages>(kinds),
                          "ready: the docs list `stages`, which is no field of the kind");
  ExpectDocumented<message::Ready>(kinds);  // and the real one passes
}

}  // namespace
}  // namespace mitra::contract
