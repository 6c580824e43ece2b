#include "report/report_page.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "common/duration_text.h"
#include "common/strings.h"
#include "manager/progress.h"
#include "report/report_assets.h"  // generated: kReportStyle, kReportScript

namespace mitra::report {
namespace {

// Collects errors thrown while the page loads (Chart.js included), before the page's script runs.
constexpr const char* kErrorTrap = R"JS(
window.reportErrors = [];
window.addEventListener('error', function (e) { window.reportErrors.push(String(e.message)); });
)JS";

using nlohmann::json;

std::string Escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Text inside <script> ends at the first "</script": written as "<\/script", which reads the
// same inside a JavaScript string or JSON.
std::string ScriptSafe(std::string text) {
  for (size_t at = 0; (at = text.find("</", at)) != std::string::npos; at += 3) {
    text.replace(at, 2, "<\\/");
  }
  return text;
}

std::string Fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  return buf;
}

std::string LocalTime(double unix_seconds) {
  return LocalTimeText(unix_seconds, "%Y-%m-%d %H:%M:%S");
}

// (generation, rank) -> steps-weighted means of compute and wait.
std::vector<RankSteps> MeansPerRank(const std::vector<RankSteps>& samples) {
  std::map<std::pair<int64_t, int>, RankSteps> sums;
  for (const RankSteps& s : samples) {
    RankSteps& sum = sums[{s.generation, s.rank}];
    const double weight = static_cast<double>(std::max<int64_t>(s.steps, 1));
    sum.generation = s.generation;
    sum.rank = s.rank;
    sum.stage = s.stage;
    sum.step = std::max(sum.step, s.step);
    sum.steps += std::max<int64_t>(s.steps, 1);
    sum.compute_s += s.compute_s * weight;
    sum.wait_s += s.wait_s * weight;
  }
  std::vector<RankSteps> means;
  for (auto& [key, sum] : sums) {
    sum.compute_s /= static_cast<double>(sum.steps);
    sum.wait_s /= static_cast<double>(sum.steps);
    means.push_back(sum);
  }
  return means;
}

// What the script draws, as JSON; times are seconds since the run started.
json ChartData(const RunReport& r, size_t max_points) {
  const double t0 = r.started > 0 ? r.started : (r.steps.empty() ? 0 : r.steps.front().time);
  json steps = {{"step", json::array()}, {"time", json::array()}, {"loss", json::array()},
                {"rate", json::array()}, {"step_time", json::array()},
                {"generation", json::array()}};
  const size_t n = r.steps.size();
  const size_t stride = std::max<size_t>(1, (n + max_points - 1) / std::max<size_t>(max_points, 1));
  std::vector<size_t> shown;
  for (size_t i = 0; i < n; i += stride) shown.push_back(i);
  if (n > 0 && shown.back() != n - 1) shown.push_back(n - 1);  // the newest step, always
  for (const size_t i : shown) {
    const StepPoint& p = r.steps[i];
    steps["step"].push_back(p.step);
    steps["time"].push_back(p.time - t0);
    steps["loss"].push_back(p.loss);
    steps["rate"].push_back(r.tokens ? p.tokens_per_s : p.samples_per_s);
    steps["step_time"].push_back(p.step_time_s);
    steps["generation"].push_back(p.generation);
  }
  json evals = json::array();
  for (const EvalPoint& e : r.evals) {
    evals.push_back({{"step", e.step}, {"time", e.time - t0}, {"loss", e.loss}});
  }
  json generations = json::array();
  for (const GenerationSpan& g : r.generations) {
    generations.push_back({{"generation", g.generation}, {"shape", g.Shape()},
                           {"start", g.launched - t0}, {"end", g.ended - t0}});
  }
  json changes = json::array();
  for (const Change& c : r.changes) {
    changes.push_back({{"kind", c.kind}, {"generation", c.generation}, {"step", c.step},
                       {"start", c.detected - t0}, {"stop", c.stop_s}, {"relaunch", c.relaunch_s},
                       {"first_step", c.ready_s + c.load_s + c.first_step_s},
                       {"downtime", c.downtime_s}});
  }
  json failures = json::array();
  for (const Failure& f : r.failures) {
    failures.push_back({{"time", f.time - t0}, {"rank", f.rank}, {"reason", f.reason}});
  }
  json checkpoints = json::array();
  for (const CheckpointMark& c : r.checkpoints) {
    checkpoints.push_back({{"step", c.step}, {"time", c.time - t0}, {"blocked", c.blocked_s},
                           {"total", c.total_s}});
  }
  json ranks = json::array();
  for (const RankSteps& m : MeansPerRank(r.rank_steps)) {
    ranks.push_back({{"generation", m.generation}, {"rank", m.rank}, {"stage", m.stage},
                     {"compute", m.compute_s}, {"wait", m.wait_s}});
  }
  json rank_series = json::array();  // rank_steps.jsonl only: compute over steps
  if (r.rank_source == RankSource::kRankSteps) {
    for (const RankSteps& s : r.rank_steps) {
      rank_series.push_back({{"generation", s.generation}, {"rank", s.rank}, {"step", s.step},
                             {"compute", s.compute_s}, {"wait", s.wait_s}});
    }
  }
  json machine_shares = json::array();  // drawn with the machines' section only
  for (const GenerationSpan& g : r.generations) {
    machine_shares.push_back({{"generation", g.generation}, {"shape", g.Shape()},
                              {"machines", g.share_machines}, {"fractions", g.ShareFractions()}});
  }
  return {{"rate_unit", r.tokens ? "tokens/s" : "samples/s"}, {"steps", steps},
          {"machine_shares", machine_shares},
          {"evals", evals}, {"generations", generations}, {"changes", changes},
          {"failures", failures}, {"checkpoints", checkpoints}, {"ranks", ranks},
          {"rank_series", rank_series}};
}

void Row(std::string& out, const std::string& name, const std::string& value) {
  out += "<tr><th>" + Escape(name) + "</th><td>" + Escape(value) + "</td></tr>\n";
}

std::string SummaryTable(const RunReport& r) {
  std::string out = "<table class=\"summary\">\n";
  Row(out, "state", r.end.state + (r.end.reason.empty() ? "" : ": " + r.end.reason));
  Row(out, "program", r.program);
  Row(out, "started", r.started > 0 ? LocalTime(r.started) : "unknown");
  Row(out, "steps", std::to_string(r.LastStep()) +
                        (r.max_steps > 0 ? " of " + std::to_string(r.max_steps) : "") +
                        (r.RepeatedSteps() > 0 ? " (" + std::to_string(r.RepeatedSteps()) +
                                                     " trained again after recoveries)"
                                               : ""));
  Row(out, "samples", manager::FormatCount(static_cast<double>(r.Samples())));
  Row(out, "wall time", ClockDuration(r.WallSeconds()) +
                            (r.managers > 1 ? " (" + std::to_string(r.managers) +
                                                  " runs of mitra run on this directory)"
                                            : ""));
  std::string shapes;
  for (const GenerationSpan& g : r.generations) shapes += (shapes.empty() ? "" : ", ") + g.Shape();
  Row(out, "generations", std::to_string(r.generations.size()) +
                              (shapes.empty() ? "" : " (" + shapes + ")"));
  Row(out, "morphs", std::to_string(r.morphs));
  Row(out, "failures", std::to_string(r.failures.size()));
  Row(out, "total downtime", DurationText(r.TotalDowntime()) + " in " +
                                 std::to_string(r.changes.size()) + " morphs and recoveries");
  Row(out, "checkpoints", std::to_string(r.checkpoints.size()));
  Row(out, "final loss", r.FinalLoss() ? Fixed(*r.FinalLoss(), 4) : "no step yet");
  if (!r.steps.empty()) {
    double rate = 0;  // the mean leaves out the first step (warm-up), as the terminal does
    const size_t from = r.steps.size() > 1 ? 1 : 0;
    for (size_t i = from; i < r.steps.size(); ++i) {
      rate += r.tokens ? r.steps[i].tokens_per_s : r.steps[i].samples_per_s;
    }
    Row(out, "mean throughput", manager::FormatCount(rate / static_cast<double>(r.steps.size() - from)) +
                                    (r.tokens ? " tokens/s" : " samples/s"));
  }
  if (r.skipped_lines > 0) {
    Row(out, "unreadable records", std::to_string(r.skipped_lines) + " (left out)");
  }
  return out + "</table>\n";
}

std::string ChangesTable(const RunReport& r) {
  if (r.changes.empty() && r.failures.empty()) {
    return "<p>No morph, failure or recovery in this run.</p>\n";
  }
  std::string out =
      "<table><tr><th>kind</th><th>cause</th><th>generation</th><th>at step</th>"
      "<th>new shape</th><th>downtime</th><th>stop</th><th>relaunch</th><th>ready</th>"
      "<th>load</th><th>first step</th><th>workers kept</th><th>state from</th></tr>\n";
  for (const Change& c : r.changes) {
    out += "<tr><td>" + Escape(c.kind) + "</td><td>" + Escape(c.cause) + "</td><td>" +
           std::to_string(c.generation) + "</td><td>" + std::to_string(c.step) + "</td><td>" +
           Escape(c.shape) + "</td><td>" + DurationText(c.downtime_s) + "</td><td>" +
           DurationText(c.stop_s) + "</td><td>" + DurationText(c.relaunch_s) + "</td><td>" +
           DurationText(c.ready_s) + "</td><td>" + DurationText(c.load_s) + "</td><td>" +
           DurationText(c.first_step_s) + "</td><td>" + std::to_string(c.kept) + "</td><td>" +
           Escape(c.state) + "</td></tr>\n";
  }
  out += "</table>\n";
  for (const Failure& f : r.failures) {
    out += "<p class=\"failure\">failure in generation " + std::to_string(f.generation) +
           " after step " + std::to_string(f.step) + ": " + Escape(f.reason) + "</p>\n";
  }
  return out;
}

std::string CheckpointsTable(const RunReport& r) {
  if (r.checkpoints.empty()) return "<p>No checkpoint recorded yet.</p>\n";
  std::string out = "<table><tr><th>step</th><th>generation</th><th>blocked</th><th>total</th></tr>\n";
  for (const CheckpointMark& c : r.checkpoints) {
    out += "<tr><td>" + std::to_string(c.step) + "</td><td>" + std::to_string(c.generation) +
           "</td><td>" + Fixed(c.blocked_s * 1e3, 1) + " ms</td><td>" +
           Fixed(c.total_s * 1e3, 1) + " ms</td></tr>\n";
  }
  return out + "</table>\n";
}

std::string RanksSection(const RunReport& r) {
  std::string out;
  switch (r.rank_source) {
    case RankSource::kRankSteps:
      out += "<p>Mean compute and wait per step of each rank (rank_steps.jsonl).</p>\n";
      break;
    case RankSource::kTraces:
      out += "<p>Per-rank step times are not recorded for this run (no rank_steps.jsonl); shown "
             "instead: the one step each rank traced per generation "
             "(logs/gen-G/rank-R.trace.json).</p>\n";
      break;
    case RankSource::kNone:
      return "<p>Per-rank step times are not recorded for this run (no rank_steps.jsonl and "
             "no step traces).</p>\n";
  }
  out += "<div class=\"chart\"><canvas id=\"ranks\"></canvas></div>\n";
  if (r.rank_source == RankSource::kRankSteps) {
    out += "<div class=\"chart\"><canvas id=\"rank_compute\"></canvas></div>\n";
  }
  out += "<table><tr><th>generation</th><th>rank</th><th>stage</th><th>compute</th>"
         "<th>wait</th></tr>\n";
  for (const RankSteps& m : MeansPerRank(r.rank_steps)) {
    out += "<tr><td>" + std::to_string(m.generation) + "</td><td>" + std::to_string(m.rank) +
           "</td><td>" + std::to_string(m.stage) + "</td><td>" + Fixed(m.compute_s * 1e3, 1) +
           " ms</td><td>" + Fixed(m.wait_s * 1e3, 1) + " ms</td></tr>\n";
  }
  out += "</table>\n";
  if (r.stragglers.empty()) return out + "<p>No straggler reported.</p>\n";
  out += "<table class=\"stragglers\"><tr><th>straggler</th><th>generation</th><th>machine</th>"
         "<th>stage</th><th>compute</th><th>stage median</th><th>ratio</th><th>steps</th></tr>\n";
  for (const Straggler& s : r.stragglers) {
    out += "<tr><td>rank " + std::to_string(s.rank) + "</td><td>" +
           std::to_string(s.generation) + "</td><td>" + Escape(s.machine) + "</td><td>" +
           std::to_string(s.stage) + "</td><td>" + Fixed(s.compute_s * 1e3, 1) + " ms</td><td>" +
           Fixed(s.peer_median_s * 1e3, 1) + " ms</td><td>" + Fixed(s.ratio, 2) + "</td><td>" +
           std::to_string(s.steps) + "</td></tr>\n";
  }
  return out + "</table>\n";
}

// Shown where machines differed: each uneven generation's shares by machine, and each machine
// found slower than planned with what followed.
std::string MachinesSection(const RunReport& r) {
  const bool uneven = std::any_of(r.generations.begin(), r.generations.end(),
                                  [](const GenerationSpan& g) { return !g.shares.empty(); });
  if (!uneven && r.slow_machines.empty()) return "";
  std::string out = "<h2>Machines that differ</h2>\n";
  out += "<div class=\"chart\"><canvas id=\"machine_shares\"></canvas></div>\n";
  if (uneven) {
    out += "<table class=\"shares\"><tr><th>generation</th><th>shape</th>"
           "<th>micro-batches a step, by replica (its first stage's machine)</th></tr>\n";
    for (const GenerationSpan& g : r.generations) {
      if (g.shares.empty()) continue;
      std::vector<std::string> parts;
      for (size_t d = 0; d < g.shares.size(); ++d) {
        parts.push_back(Escape(d < g.share_machines.size() ? g.share_machines[d] : "?") + " " +
                        std::to_string(g.shares[d]));
      }
      out += "<tr><td>" + std::to_string(g.generation) + "</td><td>" + g.Shape() + "</td><td>" +
             Join(parts, ", ") + "</td></tr>\n";
    }
    out += "</table>\n";
  }
  if (r.slow_machines.empty()) return out;
  out += "<table class=\"slow-machines\"><tr><th>machine</th><th>generation</th>"
         "<th>compute over planned</th><th>what followed</th></tr>\n";
  for (const SlowMachineMark& m : r.slow_machines) {
    const std::string followed = m.action == "replan"   ? "re-planned: " + m.plan
                                 : m.action == "keep"   ? "kept " + m.plan
                                 : m.action == "folded" ? "the next generation planned with it"
                                                        : "nothing (no profile, or one machine)";
    out += "<tr><td>" + Escape(m.machine) + "</td><td>" + std::to_string(m.generation) +
           "</td><td>" + Fixed(m.ratio, 2) + "</td><td>" + Escape(followed) + "</td></tr>\n";
  }
  return out + "</table>\n";
}

std::string Chart(const std::string& id) {
  return "<div class=\"chart\"><canvas id=\"" + id + "\"></canvas></div>\n";
}

}  // namespace

std::string RenderReportPage(const RunReport& r, const PageOptions& options) {
  const std::string title = "mitra report: " + r.run_dir;
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += "<title>" + Escape(title) + "</title>\n<style>" + std::string(kReportStyle) +
          "</style>\n";
  page += "<script>" + std::string(kErrorTrap) + "</script>\n";
  page += "<!-- Chart.js, inlined from " + Escape(options.chart_js_from) +
          " under the MIT licence of its header below -->\n<script>\n" +
          ScriptSafe(options.chart_js) + "\n</script>\n</head>\n<body>\n";
  page += "<h1>" + Escape(title) + "</h1>\n<p class=\"generated\">" +
          (r.end.finished ? "finished" : "still running") + "; report made " +
          LocalTime(options.generated_at) + "</p>\n<pre id=\"errors\"></pre>\n";
  page += "<h2>Summary</h2>\n" + SummaryTable(r);
  page += "<h2>Loss and throughput</h2>\n<div class=\"grid\">\n" + Chart("loss_step") +
          Chart("rate_step") + Chart("loss_time") + Chart("rate_time") + "</div>\n";
  page += "<h2>Step time per generation</h2>\n" + Chart("step_time");
  page += "<h2>Generations, morphs, failures and recoveries</h2>\n" + Chart("timeline") +
          ChangesTable(r);
  page += "<h2>Checkpoints</h2>\n";
  if (!r.checkpoints.empty()) page += Chart("checkpoints");
  page += CheckpointsTable(r);
  page += "<h2>Per-rank step times</h2>\n" + RanksSection(r);
  page += MachinesSection(r);
  page += "<script id=\"report-data\" type=\"application/json\">" +
          ScriptSafe(ChartData(r, options.max_chart_points).dump(-1, ' ', false, json::error_handler_t::replace)) + "</script>\n";
  page += "<script>\n" + std::string(kReportScript) + "\n</script>\n</body>\n</html>\n";
  return page;
}

}  // namespace mitra::report
