#include "checkpoint/manifest.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "checkpoint/crc32c.h"

namespace mitra::checkpoint {
namespace {

constexpr const char* kMagic = "mitra-checkpoint 1";

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08" PRIx32, v);
  return buf;
}

}  // namespace

std::string SegmentFileName(const std::string& segment) { return "seg-" + segment + ".pt"; }

std::string Manifest::Serialize() const {
  std::ostringstream out;
  out << kMagic << "\n"
      << "step " << step << "\n"
      << "stages " << stages << "\n"
      << "replicas " << replicas << "\n"
      << "partition " << partition << "\n"
      << "schedule " << schedule << "\n"
      << "global_batch " << global_batch << "\n"
      << "seed " << seed << "\n"
      << "segments";
  for (const auto& s : segments) out << " " << s;
  out << "\n";
  for (const auto& f : files) out << "file " << f.name << " " << f.bytes << " " << Hex(f.crc32c) << "\n";
  std::string body = out.str();
  return body + "end " + Hex(Crc32c(body)) + "\n";
}

Result<Manifest> Manifest::Parse(std::string_view text, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return Status::IoError(where + ": " + why + " (the checkpoint is damaged or incomplete)");
  };
  const size_t end = text.rfind("end ");
  if (text.substr(0, std::string_view(kMagic).size()) != kMagic) {
    return bad("not a mitra checkpoint manifest");
  }
  if (end == std::string_view::npos || (end > 0 && text[end - 1] != '\n')) {
    return bad("the manifest is truncated (no end line)");
  }
  const std::string body(text.substr(0, end));
  uint32_t stored = 0;
  if (std::sscanf(std::string(text.substr(end)).c_str(), "end %" SCNx32, &stored) != 1 ||
      stored != Crc32c(body)) {
    return bad("the manifest's checksum does not match its contents");
  }
  Manifest m;
  std::istringstream in(body);
  std::string line;
  std::getline(in, line);  // magic
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (key == "step") fields >> m.step;
    else if (key == "stages") fields >> m.stages;
    else if (key == "replicas") fields >> m.replicas;
    else if (key == "partition" || key == "schedule") {
      // Possibly empty: the rest of the line.
      std::string& value = key == "partition" ? m.partition : m.schedule;
      value = line.size() > key.size() + 1 ? line.substr(key.size() + 1) : "";
    }
    else if (key == "global_batch") fields >> m.global_batch;
    else if (key == "seed") fields >> m.seed;
    else if (key == "segments") {
      for (std::string s; fields >> s;) m.segments.push_back(s);
      fields.clear();  // reading to the end of the line set failbit
    } else if (key == "file") {
      FileEntry f;
      std::string crc;
      fields >> f.name >> f.bytes >> crc;
      f.crc32c = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
      m.files.push_back(f);
    }
    if (fields.fail()) return bad("cannot read the line '" + line + "'");
  }
  return m;
}

const FileEntry* Manifest::FindFile(const std::string& name) const {
  for (const auto& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace mitra::checkpoint
