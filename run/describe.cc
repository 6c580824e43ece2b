#include "run/describe.h"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <variant>

#include "common/blocking_queue.h"
#include "common/json.h"
#include "contract/worker_messages.h"

namespace mitra::run {
namespace {

using launcher::ProcessEvent;

constexpr double kKillWaitS = 5;  // after SIGKILL, how long to wait for the exit event

std::string Quote(const std::vector<std::string>& lines) {
  if (lines.empty()) return " It printed nothing.";
  std::string out = " Its last output:";
  for (const std::string& line : lines) out += "\n  | " + line;
  return out;
}

// Waits for the next event until `deadline_s` (monotonic); nullopt on timeout.
std::optional<ProcessEvent> Next(BlockingQueue<ProcessEvent>& queue, Clock& clock,
                                 double deadline_s) {
  const double wait_s = std::max(0.0, deadline_s - clock.MonotonicSeconds());
  return queue.PopFor(std::chrono::duration<double>(wait_s));
}

}  // namespace

Result<ProgramDescription> DescribeProgram(launcher::ProcessRunner& runner,
                                           const launcher::ProcessSpec& spec, Clock& clock,
                                           double timeout_s) {
  // Shared with the sink: the runner may still deliver after this function returns.
  auto queue = std::make_shared<BlockingQueue<ProcessEvent>>();
  Result<launcher::StartedProcess> started =
      runner.Start(spec, [queue](ProcessEvent event) { queue->Push(std::move(event)); });
  if (!started.ok()) {
    return Status::InvalidArgument("cannot run '" + spec.program +
                                   "' to ask for its shape: " + started.status().message());
  }
  const std::string asked = "'" + spec.program + "' with MITRA_DESCRIBE=1";
  std::optional<contract::message::Describe> record;
  std::string record_error;    // the last line that was no message
  std::string invalid_record;  // a describe record refused for its segments count
  const double deadline_s = clock.MonotonicSeconds() + timeout_s;
  std::optional<ProcessEvent> exit;
  while (!exit) {
    std::optional<ProcessEvent> event = Next(*queue, clock, deadline_s);
    if (!event) {
      (void)runner.Signal(started->id, SIGKILL);
      const double kill_deadline_s = clock.MonotonicSeconds() + kKillWaitS;
      std::optional<ProcessEvent> killed;
      while ((killed = Next(*queue, clock, kill_deadline_s)) &&
             killed->kind != ProcessEvent::Kind::kExited) {
      }
      return Status::InvalidArgument(
          asked + " did not exit within " + std::to_string(std::lround(timeout_s)) +
          " s; a mitra program prints its describe record and exits at once in that mode." +
          Quote(killed ? killed->last_lines : std::vector<std::string>{}));
    }
    if (event->kind == ProcessEvent::Kind::kExited) {
      exit = std::move(event);
      continue;
    }
    Result<contract::ReadMessage> read = contract::ParseWorkerMessage(event->message);
    if (!read.ok()) {
      const Result<JsonObject> json = JsonObject::Parse(event->message);
      if (json.ok() && json->GetString("event") == contract::message::Describe::kEvent) {
        invalid_record = event->message;
      } else {
        record_error = "a malformed @mitra line (" + read.status().message() + ")";
      }
    } else if (const auto* described = std::get_if<contract::message::Describe>(&read->message)) {
      record = *described;
    }
  }
  if (!exit->exit.ok()) {
    return Status::InvalidArgument(asked + " " + exit->exit.ToString() +
                                   "; check the program and its arguments (run it by hand "
                                   "with MITRA_DESCRIBE=1 to see the problem)." +
                                   Quote(exit->last_lines));
  }
  if (!record && !invalid_record.empty()) {
    return Status::InvalidArgument(asked +
                                   " printed a describe record without a valid \"segments\" "
                                   "count (a whole number from 1 to 1000000): " +
                                   invalid_record);
  }
  if (!record) {
    return Status::InvalidArgument(
        asked + " printed " +
        (record_error.empty() ? "no `@mitra {\"event\":\"describe\",...}` line" : record_error) +
        "; is it a program built on mitra::worker?" + Quote(exit->last_lines));
  }
  ProgramDescription description;
  description.segments = static_cast<int>(record->segments);  // 1 to 1e6: read it so
  description.tokens_per_sample = record->tokens_per_sample;
  description.micro_batch_independent = record->micro_batch_independent;
  for (const auto& [key, text] : {std::pair{"parameters", record->parameters},
                                  std::pair{"buffers", record->buffers}}) {
    if (!text) continue;
    auto parsed = ParseParameters(*text);
    if (!parsed.ok()) {
      return Status::InvalidArgument(asked + " printed a describe record with bad \"" + key +
                                     "\": " + parsed.status().message());
    }
    if (std::string_view(key) == "parameters") {
      description.parameters = std::move(parsed).value();
    } else {
      description.buffers = std::move(parsed).value();
      description.buffers_known = true;
    }
  }
  return description;
}

Result<NamedShapes> ParseParameters(const std::string& text) {
  NamedShapes out;
  std::istringstream in(text);
  for (std::string item; in >> item;) {
    const size_t open = item.find('[');
    auto shape = open == std::string::npos ? std::nullopt
                                           : checkpoint::ParseShape(std::string_view(item).substr(open));
    if (open == 0 || !shape || item.find('.') > open) {
      return Status::InvalidArgument("'" + item + "' is not <segment>.<name>[d0,d1,...]");
    }
    out.emplace_back(item.substr(0, open), std::move(*shape));
  }
  return out;
}

std::vector<int64_t> SegmentStateElements(const ProgramDescription& description) {
  std::vector<std::string> names;  // of the segments, in order
  std::vector<int64_t> elements;
  auto add = [&](const NamedShapes& list, bool new_segments) {
    for (const auto& [name, dims] : list) {
      const std::string segment = name.substr(0, name.find('.'));
      auto it = std::find(names.begin(), names.end(), segment);
      if (it == names.end()) {
        if (!new_segments) return false;
        names.push_back(segment);
        elements.push_back(0);
        it = names.end() - 1;
      }
      int64_t n = 1;
      for (const int64_t d : dims) n *= d;
      elements[it - names.begin()] += n;
    }
    return true;
  };
  if (!add(description.parameters, true) || !add(description.buffers, false) ||
      static_cast<int>(elements.size()) != description.segments) {
    return {};
  }
  return elements;
}

Status CheckCheckpointMatches(const ProgramDescription& description,
                              const checkpoint::Manifest& manifest, const std::string& path) {
  const std::string fix = "; pass another --checkpoint-dir (nothing was changed)";
  if (static_cast<int64_t>(manifest.segments.size()) != description.segments) {
    return Status::InvalidArgument(
        "checkpoint " + path + " holds a model of " + std::to_string(manifest.segments.size()) +
        " segments but the program has " + std::to_string(description.segments) +
        ": it belongs to another model" + fix);
  }
  if (description.parameters.empty()) return Status::Ok();  // the program did not say
  auto shape = [](const std::vector<int64_t>& dims) {
    return checkpoint::TensorRecord{"", checkpoint::DType::kFloat32, dims, 0}.ShapeString();
  };
  auto another = [&](const std::string& what) {
    return Status::InvalidArgument("checkpoint " + path + " was written by another model: " +
                                   what + fix);
  };
  // Per segment, the program's parameters and buffers (in its order, so the first difference
  // is the one named) against the param/ and buffer/ tensors of the segment's file.
  struct Kind {
    std::string prefix, word;
    const NamedShapes* listed;
  };
  std::vector<Kind> kinds{{"param/", "parameter", &description.parameters}};
  if (description.buffers_known) kinds.push_back({"buffer/", "buffer", &description.buffers});
  for (const Kind& kind : kinds) {
    std::map<std::string, NamedShapes> program;  // segment -> its tensors of this kind
    for (const auto& [name, dims] : *kind.listed) {
      const size_t dot = name.find('.');
      program[name.substr(0, dot)].emplace_back(name.substr(dot + 1), dims);
    }
    for (const auto& [segment, tensors] : program) {
      if (std::find(manifest.segments.begin(), manifest.segments.end(), segment) ==
          manifest.segments.end()) {
        return another("it has no segment '" + segment + "' (its segments are named differently)");
      }
    }
    for (const std::string& segment : manifest.segments) {
      const std::string file = checkpoint::SegmentFileName(segment);
      const checkpoint::FileEntry* entry = manifest.FindFile(file);
      if (!entry) return another("it has no " + file + " for segment '" + segment + "'");
      for (const auto& [local, dims] : program[segment]) {
        const checkpoint::TensorRecord* t = entry->FindTensor(kind.prefix + local);
        if (!t) {
          return another("the program's " + kind.word + " '" + segment + "." + local +
                         "' is not in it");
        }
        if (t->shape != dims) {
          return another(kind.word + " '" + segment + "." + local + "' is " + t->ShapeString() +
                         " in it but " + shape(dims) + " in the program");
        }
      }
      for (const checkpoint::TensorRecord& t : entry->tensors) {
        if (t.name.rfind(kind.prefix, 0) != 0) continue;
        const std::string local = t.name.substr(kind.prefix.size());
        bool known = false;
        for (const auto& p : program[segment]) known = known || p.first == local;
        if (!known) {
          return another("it has " + kind.word + " '" + segment + "." + local + "' " +
                         t.ShapeString() + ", which the program does not have");
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace mitra::run
