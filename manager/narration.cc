#include "manager/narration.h"

#include <cmath>
#include <cstdio>

#include "common/duration_text.h"
#include "common/overloaded.h"
#include "common/strings.h"
#include "manager/progress.h"
#include "manager/run_records.h"
#include "records/records.h"

namespace mitra::manager {
namespace {

// "12.3 MB", "1.2 GB": decimal units, three significant figures or so.
std::string MegabytesText(int64_t bytes) {
  char text[32];
  if (bytes >= 1'000'000'000) {
    std::snprintf(text, sizeof text, "%.2f GB", static_cast<double>(bytes) / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  }
  return text;
}

Narration Told(std::string event, JsonObject fields, std::string line = "", bool error = false) {
  return Narration{std::move(event), std::move(fields), std::move(line), error};
}

Narration ListChanged(const ListChangedFact& f) {
  using Action = ListChangedFact::Action;
  JsonObject fields;
  fields.Set("added", JsonValue::StringArray(f.added))
      .Set("removed", JsonValue::StringArray(f.removed))
      .SetInt("slots", f.slots)
      .SetString("phase", f.phase);
  const std::string changed = "mitra: machine list changed (" + f.change + "): ";
  switch (f.action) {
    case Action::kPlan:
      return Told("machines_changed", fields.SetString("action", "plan"));
    case Action::kKeep:
      return Told("machines_changed",
                  fields.SetString("action", f.checking.empty() ? "none" : "check"),
                  changed + (f.checking.empty()
                                 ? "the shape stays " + f.shape
                                 : "checking " + Join(f.checking, ", ") + " before it joins"));
    case Action::kMorph:
      return Told("machines_changed", fields.SetString("action", "morph"));
    case Action::kFolded:
      return Told("machines_changed", fields.SetString("action", "folded"),
                  changed + "the next generation will use it");
    case Action::kAfterReady:
      return Told("machines_changed", fields.SetString("action", "after_ready"),
                  changed + "the morph waits until the " + std::to_string(f.starting) +
                      (f.starting == 1 ? " worker" : " workers") +
                      " still starting are ready, to keep their state");
    case Action::kIgnored:
      fields.SetString("action", "none");
      if (!f.why.empty()) fields.SetString("why", f.why);
      return Told("machines_changed", fields);
  }
  return Told("machines_changed", fields);
}

Narration Drained(const DrainFact& f) {
  using Action = DrainFact::Action;
  JsonObject fields = JsonObject().SetString("machine", f.machine).SetString("by", f.by);
  const std::string head = "mitra: draining " + f.machine + " (" + f.by + "): ";
  switch (f.action) {
    case Action::kMorph:
      return Told("drain", fields.SetString("action", "morph"),
                  head + "moving the job off it with a planned morph; it stays out until its "
                         "line in the machine list changes");
    case Action::kFolded:
      return Told("drain", fields.SetString("action", "folded"),
                  head + "the next generation leaves it out");
    case Action::kKeepOff:
      return Told("drain", fields.SetString("action", "none"),
                  head + "no worker runs there; it stays out until its line in the machine list "
                         "changes");
    case Action::kUnknown:
      break;
  }
  return Told("drain_refused", fields.SetString("why", "not in the machine list"),
              "mitra: cannot drain " + f.machine + " (" + f.by +
                  "): no machine of the list has that address",
              /*error=*/true);
}

Narration Stopping(const StoppingFact& f) {
  using How = StoppingFact::How;
  JsonObject fields;
  switch (f.how) {
    case How::kAskRanks:
    case How::kBeforeReady:
      fields.SetString("reason", f.source).SetInt("step", f.step).SetNumber("timeout_s", f.timeout_s);
      return Told("stop", fields,
                  f.how == How::kAskRanks
                      ? "mitra: " + f.source + ": asking " + std::to_string(f.ranks) +
                            " workers to stop after the current step" + f.kill_hint
                      : "mitra: " + f.source + " before all workers were ready: stopping them");
    case How::kAfterTheChange:
      return Told("stop", fields.SetString("reason", f.source).SetInt("step", f.step),
                  "mitra: " + f.source + ": stopping once the workers have exited" + f.kill_hint);
    case How::kSecondRequest:
      return Told("stop", fields.SetString("reason", "second " + f.source), "", true);
  }
  return Told("stop", fields);
}

Narration HostKeptOut(const HostKeptOutFact& f) {
  JsonObject fields;
  fields.SetString("machine", f.machine).SetString("reason", f.reason);
  std::string line;
  if (f.failures) {
    fields.SetInt("failures", *f.failures);
    line = "mitra: " + f.machine + " failed " + std::to_string(*f.failures) +
           " times in a row; kept out, next health check in " + DurationText(f.retry_in_s);
  } else {
    fields.SetInt("failed_checks", f.failed_checks.value_or(1));
    line = "mitra: " + f.machine + " failed its health check (" + f.reason +
           "); kept out, next check in " + DurationText(f.retry_in_s);
  }
  fields.SetNumber("retry_in_s", RoundedSeconds(f.retry_in_s));
  return Told("host_failed", fields, line, true);
}

Narration UnmeasuredTold(const UnmeasuredMachineFact& f) {
  return Told("unmeasured_machine", JsonObject().SetString("machine", f.machine),
              "mitra: " + f.machine + " is not in the profile: planned like the profile's first "
              "machine until its steps measure it (slower than planned, it gets less work)");
}

Narration ProfileChecked(const ProfileCheckFact& f) {
  std::string corrections = "[";
  for (const planner::SpeedCorrection& c : f.corrections) {
    if (corrections.size() > 1) corrections += ",";
    corrections += JsonObject()
                       .SetString("machine", c.address)
                       .SetInt("busy", c.busy)
                       .SetNumber("factor", c.factor)
                       .ToJson();
  }
  JsonObject fields;
  fields.SetInt("generation", f.generation)
      .SetString("shape", f.shape)
      .SetNumber("predicted_step_s", f.predicted_s)
      .SetNumber("measured_step_s", f.measured_s)
      .SetNumber("ratio", f.ratio)
      .Set("corrections", JsonValue::Raw(corrections + "]"));
  if (f.corrections.empty()) return Told("profile_check", fields);
  char figures[160];
  std::snprintf(figures, sizeof figures, "steps of %s take %.3f s, %.2f times the %.3f s the profile predicted",
                f.shape.c_str(), f.measured_s, f.ratio, f.predicted_s);
  std::vector<std::string> machines;
  for (const planner::SpeedCorrection& c : f.corrections) {
    char factor[32];
    std::snprintf(factor, sizeof factor, "%.2f", c.factor);
    machines.push_back(c.address + " with " + std::to_string(c.busy) + " busy takes " + factor +
                       " times the profile's time");
  }
  return Told("profile_check", fields,
              "mitra: " + std::string(figures) + ": the next plans correct its speeds: " +
                  Join(machines, ", "));
}

Narration SlowMachineTold(const SlowMachineFact& f) {
  using Action = SlowMachineFact::Action;
  JsonObject fields;
  fields.SetString("machine", f.machine).SetNumber("ratio", f.ratio);
  if (f.correction) {
    fields.SetInt("busy", f.correction->busy).SetNumber("factor", f.correction->factor);
  }
  if (!f.plan.empty()) fields.SetString("plan", f.plan);
  char ratio[16];
  std::snprintf(ratio, sizeof ratio, "%.2f", f.ratio);
  const std::string head = "mitra: " + f.machine + " computes " + ratio +
                           " times what its plan expected; ";
  switch (f.action) {
    case Action::kReplan:
      return Told("slow_machine", fields.SetString("action", "replan"),
                  head + "re-planned with it that much slower: " + f.plan +
                      ", by a planned morph");
    case Action::kKeep:
      return Told("slow_machine", fields.SetString("action", "keep"),
                  head + "the plan with it that much slower is the one running (" + f.plan + ")");
    case Action::kFolded:
      return Told("slow_machine", fields.SetString("action", "folded"),
                  head + "the next generation plans with it that much slower");
    case Action::kAlone:
      return Told("slow_machine", fields.SetString("action", "none"),
                  head + "the job runs on no other machine, so nothing changes");
    case Action::kUnweighed:
      break;
  }
  return Told("slow_machine", fields.SetString("action", "none"),
              head + "plans without a profile (--profile) do not weigh machines' speeds, so "
                     "its share stays; --exclude-stragglers would drain it");
}

Narration Failure(const FailureFact& f) {
  records::Failure record;
  record.reason = f.during_regroup
                      ? f.reason + " (while regrouping in place: every worker starts afresh)"
                      : f.reason;
  record.step = f.step;
  if (f.where) record.rank = f.where->rank;
  if (f.after_training) {
    return Told(records::Failure::kAfterTrainingEvent, records::ToJson(record),
                "mitra: " + f.reason, true);
  }
  if (f.where) {
    record.pid = f.where->pid;
    record.machine = f.where->machine;
  }
  if (f.during_regroup) record.during_regroup = true;
  return Told(records::Failure::kEvent, records::ToJson(record), "mitra: failure: " + record.reason,
              true);
}

Narration Launched(const LaunchedFact& f) {
  records::Launch record = LaunchRecord(f.plan, f.generation, f.program, f.pids, f.launch_s);
  record.machines = f.machines;
  record.kept.assign(f.kept.begin(), f.kept.end());
  record.resume_step = f.resume_step;
  record.rdzv = f.rendezvous;
  record.held_step = f.held_step;
  const JsonObject fields = records::ToJson(record);
  std::vector<std::string> pids;
  int started = 0;
  for (const int64_t pid : f.pids) {
    pids.push_back(pid > 0 ? std::to_string(pid) : "-");
    started += pid > 0;
  }
  const int kept = static_cast<int>(f.kept.size());
  started -= kept;
  const std::string shape = std::to_string(f.plan.stages) + " x " + std::to_string(f.plan.replicas);
  if (started + kept == 0) {
    return Told(records::Launch::kEvent, fields, "mitra: generation " + std::to_string(f.generation) + " (" +
                                      shape + "): no worker could be started",
                true);
  }
  std::string line = "mitra: ";
  if (started > 0) line += "launched " + std::to_string(started) + (started == 1 ? " worker" : " workers");
  if (started > 0 && kept > 0) line += " and ";
  if (kept > 0) line += "kept " + std::to_string(kept) + " parked " + (kept == 1 ? "worker" : "workers");
  line += " (generation " + std::to_string(f.generation) + ", " + shape;
  if (f.resume_step > 0) line += ", from step " + std::to_string(f.resume_step);
  line += "), pids " + Join(pids, " ");
  if (f.held_partial) {
    line += "; the workers kept do not hold every stage's state of one step: " +
            std::string(f.resume_step > 0 ? "the job resumes from the newest checkpoint"
                                          : "with no checkpoint yet, the job starts again from "
                                            "step 0");
  }
  return Told(records::Launch::kEvent, fields, line);
}

Narration StepLost(const StepLostFact& f) {
  return Told("step_lost",
              JsonObject().SetInt("expected_step", f.expected_step).SetInt("resume_step", f.resume_step),
              "mitra: warning: the workers stopped after step " + std::to_string(f.expected_step) +
                  " but the newest complete checkpoint is step " + std::to_string(f.resume_step) +
                  "; continuing from it",
              true);
}

Narration Morphing(const MorphFact& f) {
  if (f.skipped) return Told("morph_skipped", JsonObject().SetString("reason", f.reason));
  records::Morph record;
  record.reason = f.reason;
  record.from = f.from;
  record.step = f.step;
  record.state = f.in_memory ? "memory" : "checkpoint";
  return Told(records::Morph::kEvent, records::ToJson(record),
              "mitra: " + f.reason + ": asking " + std::to_string(f.ranks) +
                  (f.in_memory ? " workers to stop after the same step, keeping their state in "
                                 "memory"
                               : " workers to checkpoint and stop after the same step"));
}

Narration TrainingAgain(const TrainingAgainFact& f) {
  // A process start, or a regroup of parked workers, or both.
  const std::string ready = f.kept == 0 ? "start" : f.started == 0 ? "regroup" : "start and regroup";
  const std::string head =
      f.first_training
          ? "mitra: started after a failed start: training in " + f.shape + " at step " +
                std::to_string(f.step) + "; " + DurationText(f.downtime_s) + " since the failure"
          : "mitra: " + f.kind + " done: training again in " + f.shape + " at step " +
                std::to_string(f.step) + "; downtime " + DurationText(f.downtime_s);
  std::string line = head + " (stop " + DurationText(f.stop_s) + ", relaunch " +
                     DurationText(f.relaunch_s) + ", " + ready + " " + DurationText(f.ready_s) +
                     ", load " + DurationText(f.load_s) + ", first step " +
                     DurationText(f.first_step_s) + ")";
  if (f.kept > 0) {
    line += "; " + std::to_string(f.kept) + (f.kept == 1 ? " worker" : " workers") + " kept, " +
            std::to_string(f.started) + " started";
  }
  if (f.sources && f.sources->kept + f.sources->peer > 0) {  // else: the checkpoint, as always
    const StateSources& s = *f.sources;
    line += "; state: " + std::to_string(s.kept) + " kept, " + std::to_string(s.peer) +
            " from peers";
    if (s.peer_bytes > 0) {
      line += " (" + MegabytesText(s.peer_bytes) + " at " +
              MegabytesText(static_cast<int64_t>(s.peer_bytes_per_s)) + "/s)";
    }
    line += ", " + std::to_string(s.checkpoint) + " from the checkpoint";
  }
  records::FirstStep record;
  record.kind = f.kind;
  record.step = f.step;
  record.shape = f.shape;
  record.kept = f.kept;
  record.started = f.started;
  record.downtime_s = RoundedSeconds(f.downtime_s);
  record.stop_s = RoundedSeconds(f.stop_s);
  record.relaunch_s = RoundedSeconds(f.relaunch_s);
  record.ready_s = RoundedSeconds(f.ready_s);
  record.load_s = RoundedSeconds(f.load_s);
  record.first_step_s = RoundedSeconds(f.first_step_s);
  if (f.sources) {
    record.state_kept = f.sources->kept;
    record.state_peer = f.sources->peer;
    record.state_checkpoint = f.sources->checkpoint;
    record.peer_bytes = f.sources->peer_bytes;
    record.peer_bytes_per_s = std::round(f.sources->peer_bytes_per_s);
  }
  return Told(records::FirstStep::kEvent, records::ToJson(record), line);
}

Narration Starting(const StartingFact& f) {
  return Told("starting",
              JsonObject()
                  .SetInt("starting", f.starting)
                  .SetInt("ranks", f.total)
                  .SetInt("silent", f.silent)
                  .SetNumber("for_s", RoundedSeconds(f.for_s))
                  .SetNumber("timeout_s", RoundedSeconds(f.timeout_s)),
              "mitra: " + StartingText(f));
}

}  // namespace

std::string StartingText(const StartingFact& f) {
  std::string text = std::to_string(f.starting) + " of " + std::to_string(f.total) +
                     (f.total == 1 ? " worker" : " workers") + " starting for " +
                     DurationText(f.for_s);
  if (f.silent > 0) text += " (" + std::to_string(f.silent) + " still loading its program)";
  return text + "; waiting up to " + DurationText(f.timeout_s) + " (--start-timeout)";
}

Narration Narrate(const Fact& fact) {
  return std::visit(
      Overloaded{
          [](const LaunchedFact& f) { return Launched(f); },
          [](const StepLostFact& f) { return StepLost(f); },
          [](const ListChangedFact& f) { return ListChanged(f); },
          [](const DrainFact& f) { return Drained(f); },
          [](const AllReadyFact& f) {
            records::Ready record;
            record.rendezvous_s = RoundedSeconds(f.after_s);
            return Told(records::Ready::kEvent, records::ToJson(record),
                        (f.ranks == 1 ? std::string("mitra: the worker is ready after ")
                                      : "mitra: all " + std::to_string(f.ranks) +
                                            " workers ready after ") +
                            DurationText(f.after_s));
          },
          [](const TrainingAgainFact& f) { return TrainingAgain(f); },
          [](const TrainingDoneFact& f) {
            return Told("training_done", JsonObject().SetInt("step", f.step));
          },
          [](const RankStoppedFact& f) {
            return Told("rank_stopped", JsonObject()
                                            .SetInt("rank", f.rank)
                                            .SetInt("step", f.step)
                                            .SetNumber("after_s", RoundedSeconds(f.after_s)));
          },
          [](const StartFailedFact& f) {
            return Told("start_failed",
                        JsonObject().SetInt("rank", f.rank).SetString("reason", f.reason));
          },
          [](const HostHealthyFact& f) {
            return Told("host_healthy", JsonObject().SetString("machine", f.machine),
                        f.local ? "" : "mitra: " + f.machine + " passed its health check");
          },
          [](const HostKeptOutFact& f) { return HostKeptOut(f); },
          [](const StopRequestedFact& f) {
            return Told("signal",
                        JsonObject().SetString("source", f.source).SetString("state", f.state));
          },
          [](const StoppingFact& f) { return Stopping(f); },
          [](const TimeoutFact& f) {
            return Told(f.kind == TimeoutFact::Kind::kStop ? "stop_timeout" : "finish_timeout",
                        JsonObject().SetString("reason", f.reason), "mitra: " + f.reason, true);
          },
          [](const KillFact& f) {
            JsonObject fields;
            fields.Set("pids", JsonValue::IntArray(f.pids));
            if (!f.reason.empty()) fields.SetString("reason", f.reason);
            return Told("kill", fields);
          },
          [](const TerminateFact& f) {
            return Told("terminate", JsonObject()
                                         .SetString("reason", f.reason)
                                         .Set("pids", JsonValue::IntArray(f.pids))
                                         .SetNumber("grace_s", f.grace_s));
          },
          [](const AbandonFact& f) {
            return Told("abandon", JsonObject().Set("ranks", JsonValue::StringArray(f.ranks)),
                        "mitra: no exit seen " + DurationText(f.after_s) + " after SIGKILL from " +
                            Join(f.ranks, ", "),
                        true);
          },
          [](const StartingFact& f) { return Starting(f); },
          [](const WaitingFact& f) {
            return Told("waiting", JsonObject().SetString("reason", f.reason),
                        "mitra: waiting: " + f.reason);
          },
          [](const WarmUpFact& f) {
            const size_t n = f.machines.size();
            return Told("warm_up",
                        JsonObject()
                            .SetString("reason", f.reason)
                            .Set("machines", JsonValue::StringArray(f.machines)),
                        "mitra: " + f.reason + ": starting " + std::to_string(n) + " new " +
                            (n == 1 ? "worker" : "workers") +
                            " first; the job trains on until they are ready");
          },
          [](const StandbyFailedFact& f) {
            return Told("standby_failed",
                        JsonObject()
                            .SetString("machine", f.machine)
                            .SetString("reason", f.reason)
                            .SetBool("morph", f.morph),
                        "mitra: a new worker on " + f.machine + " could not start: " + f.reason +
                            (f.morph ? "; morphing without it"
                                     : "; the job trains on in its shape"),
                        true);
          },
          [](const MorphFact& f) { return Morphing(f); },
          [](const FailureFact& f) { return Failure(f); },
          [](const ProfileCheckFact& f) { return ProfileChecked(f); },
          [](const SlowMachineFact& f) { return SlowMachineTold(f); },
          [](const UnmeasuredMachineFact& f) { return UnmeasuredTold(f); },
      },
      fact);
}

}  // namespace mitra::manager
