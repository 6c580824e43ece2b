// The checkpoint manifest (checkpoint/manifest.h): read by `mitra run` before it resumes, by
// `mitra checkpoint list/verify`, and by every worker, from a directory anything may have
// damaged.
//
// The input is parsed as it is, and parsed again with its `end` line's CRC-32C recomputed:
// almost no mutation keeps the checksum right, and without the second parse the fuzzer would
// never get past it to the lines.
//
// Invariants: a parsed manifest serializes to a manifest that parses, and serializing that
// gives the same text; every listed tensor's byte count (what readers allocate) is computed
// without overflow; files and tensors are found by their names.
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "checkpoint/crc32c.h"
#include "checkpoint/manifest.h"
#include "fuzz/fuzz_check.h"

namespace mitra::checkpoint {
namespace {

void CheckManifest(const Manifest& m) {
  for (const FileEntry& f : m.files) {
    FUZZ_CHECK(m.FindFile(f.name) != nullptr);
    for (const TensorRecord& t : f.tensors) {
      FUZZ_CHECK(f.FindTensor(t.name) != nullptr);
      FUZZ_CHECK(t.numel() >= 0);
      (void)t.bytes();
    }
  }
  const std::string text = m.Serialize();
  Result<Manifest> again = Manifest::Parse(text, "MANIFEST");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->Serialize() == text);
}

}  // namespace
}  // namespace mitra::checkpoint

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mitra::checkpoint;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mitra::Result<Manifest> manifest = Manifest::Parse(text, "MANIFEST");
  if (manifest.ok()) CheckManifest(*manifest);

  std::string body(text.substr(0, text.rfind("end ")));
  if (!body.empty() && body.back() != '\n') body += '\n';
  char end[32];
  std::snprintf(end, sizeof(end), "end %08" PRIx32 "\n", Crc32c(body));
  mitra::Result<Manifest> resealed = Manifest::Parse(body + end, "MANIFEST");
  if (resealed.ok()) CheckManifest(*resealed);
  return 0;
}
