#include "checkpoint/manifest.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "checkpoint/crc32c.h"
#include "common/strings.h"

namespace mitra::checkpoint {
namespace {

constexpr const char* kMagic = "mitra-checkpoint 2";
constexpr const char* kMagicPrefix = "mitra-checkpoint ";

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08" PRIx32, v);
  return buf;
}

}  // namespace

std::string SegmentFileName(const std::string& segment) { return "seg-" + segment + ".pt"; }

bool IsCheckpointFileName(std::string_view name) {
  constexpr std::string_view kPrefix = "seg-", kSuffix = ".pt";
  if (name == kTrainerFileName) return true;
  return name.size() > kPrefix.size() + kSuffix.size() && StartsWith(name, kPrefix) &&
         EndsWith(name, kSuffix) &&
         IsPlainName(name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size()));
}

std::string FileLines(const FileEntry& f) {
  std::string out = "file " + f.name + " " + std::to_string(f.bytes) + " " + Hex(f.crc32c) + "\n";
  for (const TensorRecord& t : f.tensors) {
    out += "tensor " + t.name + " " + std::string(DTypeName(t.dtype)) + " " + t.ShapeString() +
           " " + std::to_string(t.offset) + "\n";
  }
  return out;
}

Status ParseFileLine(const std::string& line, std::vector<FileEntry>* files) {
  std::istringstream fields(line);
  std::string key;
  fields >> key;
  if (key == "file") {
    FileEntry f;
    std::string crc;
    fields >> f.name >> f.bytes >> crc;
    if (fields.fail() || crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return Status::IoError("cannot read the line '" + line + "'");
    }
    if (!IsCheckpointFileName(f.name)) {
      return Status::IoError("the line '" + line + "' names a file mitra does not write (only " +
                             kTrainerFileName + " and seg-<segment>.pt, in the checkpoint's own "
                             "directory)");
    }
    f.crc32c = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
    files->push_back(std::move(f));
    return Status::Ok();
  }
  if (key == "tensor") {
    TensorRecord t;
    std::string dtype, shape;
    fields >> t.name >> dtype >> shape >> t.offset;
    const auto parsed_dtype = ParseDType(dtype);
    const auto parsed_shape = ParseShape(shape);
    if (fields.fail() || !parsed_dtype || !parsed_shape || files->empty()) {
      return Status::IoError("cannot read the line '" + line + "'");
    }
    t.dtype = *parsed_dtype;
    t.shape = *parsed_shape;
    files->back().tensors.push_back(std::move(t));
    return Status::Ok();
  }
  return Status::IoError("the line '" + line + "' is neither a file nor a tensor line");
}

std::string Manifest::Serialize() const {
  std::ostringstream out;
  out << kMagic << "\n"
      << "step " << step << "\n"
      << "stages " << stages << "\n"
      << "replicas " << replicas << "\n"
      << "partition " << partition << "\n"
      << "schedule " << schedule << "\n"
      << "global_batch " << global_batch << "\n"
      << "seed " << seed << "\n";
  if (chunk_size > 0) {
    out << "chunk_size " << chunk_size << "\n"
        << "micro_batch_independent " << (micro_batch_independent ? 1 : 0) << "\n";
  }
  if (!optimizer.empty()) out << "optimizer " << optimizer << "\n";
  if (module_keys) out << "keys module\n";
  out << "segments";
  for (const auto& s : segments) out << " " << s;
  out << "\n";
  for (const auto& f : files) out << FileLines(f);
  std::string body = out.str();
  return body + "end " + Hex(Crc32c(body)) + "\n";
}

Result<Manifest> Manifest::Parse(std::string_view text, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return Status::IoError(where + ": " + why + " (the checkpoint is damaged or incomplete)");
  };
  const size_t end = text.rfind("end ");
  const std::string_view first_line = text.substr(0, text.find('\n'));
  if (first_line.substr(0, std::string_view(kMagicPrefix).size()) != kMagicPrefix) {
    return bad("not a mitra checkpoint manifest");
  }
  if (first_line != kMagic) {
    return Status::IoError(where + ": written in checkpoint format '" +
                           std::string(first_line.substr(std::string_view(kMagicPrefix).size())) +
                           "' but this mitra reads format 2 (docs/checkpoint-format.md); "
                           "resume it with the mitra that wrote it, or pass another "
                           "--checkpoint-dir");
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
    else if (key == "chunk_size") fields >> m.chunk_size;
    else if (key == "micro_batch_independent") fields >> m.micro_batch_independent;
    else if (key == "optimizer") fields >> m.optimizer;
    else if (key == "keys") {
      std::string keys;
      fields >> keys;
      m.module_keys = keys == "module";
    }
    else if (key == "segments") {
      for (std::string s; fields >> s;) m.segments.push_back(s);
      fields.clear();  // reading to the end of the line set failbit
    } else if (key == "file" || key == "tensor") {
      if (Status s = ParseFileLine(line, &m.files); !s.ok()) return bad(s.message());
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

const TensorRecord* FileEntry::FindTensor(const std::string& tensor) const {
  for (const auto& t : tensors) {
    if (t.name == tensor) return &t;
  }
  return nullptr;
}

}  // namespace mitra::checkpoint
