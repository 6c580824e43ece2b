#include "planner/profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

namespace mitra::planner {
namespace {

using nlohmann::json;

json Samples(const std::vector<std::pair<int64_t, double>>& samples) {
  json out = json::array();
  for (const auto& [bytes, seconds] : samples) out.push_back({bytes, seconds});
  return out;
}

// A whole number from `v`, which must hold one that fits T. nlohmann's get<T>() casts any
// number, and a double beyond T's range (1e26) makes that cast undefined.
template <typename T>
T Whole(const json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                               : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                     v.get<int64_t>() <= std::numeric_limits<T>::max()) {
      return static_cast<T>(v.get<int64_t>());
    }
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= static_cast<double>(std::numeric_limits<T>::min()) &&
        d < static_cast<double>(std::numeric_limits<T>::max()) && d == std::floor(d)) {
      return static_cast<T>(d);
    }
  }
  throw json::type_error::create(302, "expected a whole number that fits, not " + v.dump(),
                                 &v);
}

std::vector<std::pair<int64_t, double>> ReadSamples(const json& j) {
  std::vector<std::pair<int64_t, double>> out;
  for (const json& s : j) out.emplace_back(Whole<int64_t>(s.at(0)), s.at(1).get<double>());
  return out;
}

// Linear interpolation of y over the (x, y) points, extrapolated from the nearest two.
double Interpolate(const std::vector<std::pair<double, double>>& points, double x) {
  if (points.size() == 1) return points[0].second * (points[0].first > 0 ? x / points[0].first : 1);
  size_t hi = 1;
  while (hi + 1 < points.size() && points[hi].first < x) ++hi;
  const auto& [x0, y0] = points[hi - 1];
  const auto& [x1, y1] = points[hi];
  const double y = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
  return std::max(0.0, y);
}

}  // namespace

void ScaleCompute(MachineProfile& m, double factor) {
  m.sample_s *= factor;
  for (SegmentProfile& segment : m.segments) {
    segment.update_s *= factor;
    for (SegmentCost& cost : segment.costs) {
      cost.forward_s *= factor;
      cost.forward_nograd_s *= factor;
      cost.backward_s *= factor;
      cost.weight_s *= factor;
    }
  }
}

double MachineProfile::SpeedAt(int k) const {
  if (k <= 1 || speed.empty()) return 1.0;
  if (k <= static_cast<int>(speed.size())) return speed[k - 1];
  const int measured = static_cast<int>(speed.size());
  return speed.back() * measured / k;
}

double BusyLatency(const LinkProfile& link) {
  std::vector<double> extra;
  for (const auto& [bytes, seconds] : link.busy_samples) {
    extra.push_back(std::max(0.0, seconds - static_cast<double>(bytes) / link.bytes_per_s));
  }
  if (extra.empty()) return 0;
  std::sort(extra.begin(), extra.end());
  return extra[extra.size() / 2];
}

std::pair<double, double> FitLatencyBandwidth(
    const std::vector<std::pair<int64_t, double>>& samples) {
  if (samples.empty()) return {0, 1e9};
  if (samples.size() == 1) {
    return {0, samples[0].second > 0 ? samples[0].first / samples[0].second : 1e9};
  }
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [bytes, seconds] : samples) {
    const double x = static_cast<double>(bytes);
    sx += x;
    sy += seconds;
    sxx += x * x;
    sxy += x * seconds;
  }
  const double n = static_cast<double>(samples.size());
  double slope = (n * sxy - sx * sy) / std::max(1e-300, n * sxx - sx * sx);
  double latency = (sy - slope * sx) / n;
  if (latency < 0) {  // through the origin instead
    latency = 0;
    slope = sxy / std::max(1e-300, sxx);
  }
  return {latency, slope > 0 ? 1.0 / slope : 1e12};
}

int Profile::num_segments() const {
  return machines.empty() ? 0 : static_cast<int>(machines[0].segments.size());
}

const MachineProfile& Profile::Machine(const std::string& address) const {
  for (const MachineProfile& m : machines) {
    if (m.address == address) return m;
  }
  return machines.front();
}

SegmentCost Profile::CostAt(const MachineProfile& machine, int segment, int64_t micro_batch) const {
  const std::vector<SegmentCost>& costs = machine.segments.at(segment).costs;
  for (const SegmentCost& c : costs) {
    if (c.micro_batch == micro_batch) return c;
  }
  auto points = [&](auto field) {
    std::vector<std::pair<double, double>> out;
    for (const SegmentCost& c : costs) out.emplace_back(static_cast<double>(c.micro_batch), field(c));
    return out;
  };
  const double x = static_cast<double>(micro_batch);
  SegmentCost out;
  out.micro_batch = micro_batch;
  out.forward_s = Interpolate(points([](const SegmentCost& c) { return c.forward_s; }), x);
  out.forward_nograd_s =
      Interpolate(points([](const SegmentCost& c) { return c.forward_nograd_s; }), x);
  out.backward_s = Interpolate(points([](const SegmentCost& c) { return c.backward_s; }), x);
  out.weight_s = Interpolate(points([](const SegmentCost& c) { return c.weight_s; }), x);
  out.output_bytes = std::llround(
      Interpolate(points([](const SegmentCost& c) { return double(c.output_bytes); }), x));
  out.graph_bytes = std::llround(
      Interpolate(points([](const SegmentCost& c) { return double(c.graph_bytes); }), x));
  return out;
}

namespace {

// The link measured between two machines (or within one), else one of the same kind, else any;
// null when none was measured.
const LinkProfile* LinkBetween(const std::vector<LinkProfile>& links, const std::string& from,
                               const std::string& to) {
  const LinkProfile* best = nullptr;
  for (const LinkProfile& l : links) {
    if ((l.from == from && l.to == to) || (l.from == to && l.to == from)) return &l;
    // A link of the same kind (within a machine, or between two) stands in for one not measured.
    if (best == nullptr && (l.from == l.to) == (from == to)) best = &l;
  }
  if (best == nullptr && !links.empty()) best = &links.front();  // the only kind measured
  return best;
}

}  // namespace

double Profile::P2pSeconds(const std::string& from, const std::string& to, int64_t bytes,
                           bool busy) const {
  const LinkProfile* best = LinkBetween(links, from, to);
  if (best == nullptr) return 0;
  if (busy && best->busy_latency_s > 0) {
    return best->busy_latency_s + static_cast<double>(bytes) / best->bytes_per_s;
  }
  return best->latency_s + static_cast<double>(bytes) / best->bytes_per_s;
}

double Profile::SendSeconds(const std::string& from, const std::string& to, int64_t bytes) const {
  const LinkProfile* link = LinkBetween(links, from, to);
  if (link == nullptr || link->send_bytes_per_s <= 0) return 0;
  return link->send_latency_s + static_cast<double>(bytes) / link->send_bytes_per_s;
}

double Profile::AllreduceSeconds(int group, int64_t bytes) const {
  if (group <= 1 || bytes <= 0) return 0;
  const AllreduceProfile* nearest = nullptr;
  for (const AllreduceProfile& a : allreduce) {
    if (a.group == group) return a.latency_s + static_cast<double>(bytes) / a.bytes_per_s;
    if (a.group < group) nearest = &a;
  }
  if (nearest == nullptr) {
    if (allreduce.empty()) return 0;
    nearest = &allreduce.front();
  }
  // Bandwidth as a ring all-reduce: each process sends 2 (g - 1) / g of the data. Latency as
  // recursive halving and doubling: log2 g rounds (a ring's 2 (g - 1) rounds would make large
  // groups latency-bound, which implementations avoid).
  const double g0 = nearest->group, g = group;
  const double volume = (2 * (g - 1) / g) / (2 * (g0 - 1) / g0);
  const double rounds = std::ceil(std::log2(g)) / std::max(1.0, std::ceil(std::log2(g0)));
  return nearest->latency_s * rounds + static_cast<double>(bytes) * volume / nearest->bytes_per_s;
}

namespace {

json MachineToJson(const MachineProfile& m) {
  json jm = {{"address", m.address},   {"slots", m.slots}, {"memory_bytes", m.memory_bytes},
             {"sample_s", m.sample_s}, {"speed", m.speed}, {"segments", json::array()}};
  for (const SegmentProfile& s : m.segments) {
    json js = {{"name", s.name},
               {"parameters", s.parameters},
               {"parameter_bytes", s.parameter_bytes},
               {"buffer_bytes", s.buffer_bytes},
               {"optimizer_bytes", s.optimizer_bytes},
               {"update_s", s.update_s},
               {"costs", json::array()}};
    for (const SegmentCost& c : s.costs) {
      js["costs"].push_back({{"micro_batch", c.micro_batch},
                             {"forward_s", c.forward_s},
                             {"forward_nograd_s", c.forward_nograd_s},
                             {"backward_s", c.backward_s},
                             {"weight_s", c.weight_s},
                             {"output_bytes", c.output_bytes},
                             {"graph_bytes", c.graph_bytes}});
    }
    jm["segments"].push_back(js);
  }
  return jm;
}

MachineProfile MachineFromJson(const json& jm) {  // throws json::exception
  MachineProfile m;
  m.address = jm.at("address").get<std::string>();
  m.slots = Whole<int>(jm.at("slots"));
  m.memory_bytes = Whole<int64_t>(jm.at("memory_bytes"));
  m.sample_s = jm.at("sample_s").get<double>();
  m.speed = jm.at("speed").get<std::vector<double>>();
  for (const json& js : jm.at("segments")) {
    SegmentProfile s;
    s.name = js.at("name").get<std::string>();
    s.parameters = Whole<int64_t>(js.at("parameters"));
    s.parameter_bytes = Whole<int64_t>(js.at("parameter_bytes"));
    s.buffer_bytes = Whole<int64_t>(js.at("buffer_bytes"));
    s.optimizer_bytes = Whole<int64_t>(js.at("optimizer_bytes"));
    s.update_s = js.at("update_s").get<double>();
    for (const json& jc : js.at("costs")) {
      SegmentCost c;
      c.micro_batch = Whole<int64_t>(jc.at("micro_batch"));
      c.forward_s = jc.at("forward_s").get<double>();
      c.forward_nograd_s = jc.at("forward_nograd_s").get<double>();
      c.backward_s = jc.at("backward_s").get<double>();
      c.weight_s = jc.value("weight_s", 0.0);
      c.output_bytes = Whole<int64_t>(jc.at("output_bytes"));
      c.graph_bytes = Whole<int64_t>(jc.at("graph_bytes"));
      s.costs.push_back(c);
    }
    m.segments.push_back(std::move(s));
  }
  return m;
}

json CommToJson(const CommProfile& c) {
  json j;
  j["step_sync_s"] = c.step_sync_s;
  j["links"] = json::array();
  for (const LinkProfile& l : c.links) {
    j["links"].push_back({{"from", l.from},
                          {"to", l.to},
                          {"latency_s", l.latency_s},
                          {"bytes_per_s", l.bytes_per_s},
                          {"samples", Samples(l.samples)},
                          {"busy_latency_s", l.busy_latency_s},
                          {"busy_samples", Samples(l.busy_samples)},
                          {"send_latency_s", l.send_latency_s},
                          {"send_bytes_per_s", l.send_bytes_per_s},
                          {"send_samples", Samples(l.send_samples)}});
  }
  j["allreduce"] = json::array();
  for (const AllreduceProfile& a : c.allreduce) {
    j["allreduce"].push_back({{"group", a.group},
                              {"latency_s", a.latency_s},
                              {"bytes_per_s", a.bytes_per_s},
                              {"samples", Samples(a.samples)},
                              {"busy_samples", Samples(a.busy_samples)}});
  }
  return j;
}

CommProfile CommFromJson(const json& j) {  // throws json::exception
  CommProfile c;
  c.step_sync_s = j.at("step_sync_s").get<double>();
  for (const json& jl : j.at("links")) {
    LinkProfile l;
    l.from = jl.at("from").get<std::string>();
    l.to = jl.at("to").get<std::string>();
    l.latency_s = jl.at("latency_s").get<double>();
    l.bytes_per_s = jl.at("bytes_per_s").get<double>();
    l.samples = ReadSamples(jl.at("samples"));
    l.busy_latency_s = jl.value("busy_latency_s", 0.0);
    if (jl.contains("busy_samples")) l.busy_samples = ReadSamples(jl.at("busy_samples"));
    l.send_latency_s = jl.value("send_latency_s", 0.0);
    l.send_bytes_per_s = jl.value("send_bytes_per_s", 0.0);
    if (jl.contains("send_samples")) l.send_samples = ReadSamples(jl.at("send_samples"));
    c.links.push_back(std::move(l));
  }
  for (const json& ja : j.at("allreduce")) {
    AllreduceProfile a;
    a.group = Whole<int>(ja.at("group"));
    a.latency_s = ja.at("latency_s").get<double>();
    a.bytes_per_s = ja.at("bytes_per_s").get<double>();
    a.samples = ReadSamples(ja.at("samples"));
    if (ja.contains("busy_samples")) a.busy_samples = ReadSamples(ja.at("busy_samples"));
    c.allreduce.push_back(std::move(a));
  }
  return c;
}

}  // namespace

std::string MachineProfileJson(const MachineProfile& machine) {
  return MachineToJson(machine).dump();
}

Result<MachineProfile> ParseMachineProfile(const std::string& text) {
  try {
    return MachineFromJson(json::parse(text));
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("a malformed machine profile: ") + e.what());
  }
}

std::string CommProfileJson(const CommProfile& comm) { return CommToJson(comm).dump(); }

Result<CommProfile> ParseCommProfile(const std::string& text) {
  try {
    return CommFromJson(json::parse(text));
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("a malformed communication profile: ") + e.what());
  }
}

double Profile::AllreduceAfterCompute(int group, int64_t bytes) const {
  if (group <= 1 || bytes <= 0) return 0;
  const AllreduceProfile* nearest = nullptr;
  for (const AllreduceProfile& a : allreduce) {
    if (!a.busy_samples.empty() && (nearest == nullptr || a.group <= group)) nearest = &a;
  }
  if (nearest == nullptr) return -1;
  std::vector<std::pair<double, double>> points;
  for (const auto& [b, seconds] : nearest->busy_samples) points.emplace_back(static_cast<double>(b), seconds);
  // Larger groups move more data per process, as AllreduceSeconds scales it.
  const double scale = nearest->group == group
                           ? 1.0
                           : AllreduceSeconds(group, bytes) /
                                 std::max(1e-12, AllreduceSeconds(nearest->group, bytes));
  return Interpolate(points, static_cast<double>(bytes)) * scale;
}

std::string Profile::ToJson() const {
  json j;
  j["format"] = kFormat;
  j["program"] = program;
  j["program_args"] = program_args;
  j["micro_batches"] = micro_batches;
  j["machines"] = json::array();
  for (const MachineProfile& m : machines) j["machines"].push_back(MachineToJson(m));
  j["comm"] = CommToJson(CommProfile{links, allreduce, step_sync_s});
  return j.dump(1) + "\n";
}

Result<Profile> Profile::FromJson(const std::string& text, const std::string& where) {
  Profile p;
  try {
    const json j = json::parse(text);
    if (Whole<int>(j.at("format")) != kFormat) {
      return Status::InvalidArgument(where + " is a profile of format " +
                                     std::to_string(Whole<int>(j.at("format"))) +
                                     ", this mitra reads format " + std::to_string(kFormat) +
                                     ": profile the program again with `mitra profile`");
    }
    p.program = j.at("program").get<std::string>();
    p.program_args = j.at("program_args").get<std::vector<std::string>>();
    p.micro_batches = j.at("micro_batches").get<std::vector<int64_t>>();
    for (const json& jm : j.at("machines")) p.machines.push_back(MachineFromJson(jm));
    CommProfile comm = CommFromJson(j.at("comm"));
    p.links = std::move(comm.links);
    p.allreduce = std::move(comm.allreduce);
    p.step_sync_s = comm.step_sync_s;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(where + " is not a valid profile (" + e.what() +
                                   "): profile the program again with `mitra profile`");
  }
  if (p.machines.empty()) {
    return Status::InvalidArgument(where + " profiles no machine: profile the program again");
  }
  for (const MachineProfile& m : p.machines) {
    if (m.segments.size() != p.machines[0].segments.size()) {
      return Status::InvalidArgument(where + ": " + m.address + " has " +
                                     std::to_string(m.segments.size()) + " segments, " +
                                     p.machines[0].address + " " +
                                     std::to_string(p.machines[0].segments.size()));
    }
    for (const SegmentProfile& s : m.segments) {
      if (s.costs.empty()) {
        return Status::InvalidArgument(where + ": segment '" + s.name + "' of " + m.address +
                                       " has no costs");
      }
    }
  }
  std::sort(p.allreduce.begin(), p.allreduce.end(),
            [](const AllreduceProfile& a, const AllreduceProfile& b) { return a.group < b.group; });
  return p;
}

std::string Profile::SegmentsCsv() const {
  std::ostringstream out;
  out << "machine,segment,micro_batch,forward_s,forward_nograd_s,backward_s,output_bytes,"
         "graph_bytes,parameters,update_s,weight_s\n";
  for (const MachineProfile& m : machines) {
    for (const SegmentProfile& s : m.segments) {
      for (const SegmentCost& c : s.costs) {
        out << m.address << "," << s.name << "," << c.micro_batch << "," << c.forward_s << ","
            << c.forward_nograd_s << "," << c.backward_s << "," << c.output_bytes << ","
            << c.graph_bytes << "," << s.parameters << "," << s.update_s << "," << c.weight_s
            << "\n";
      }
    }
  }
  return out.str();
}

}  // namespace mitra::planner
