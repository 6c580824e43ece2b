// Manifest: the last file written into a checkpoint, and the proof that it is complete.
//
// A small text file (docs/checkpoint-format.md):
//
//   mitra-checkpoint 2
//   step 120
//   stages 2
//   replicas 2
//   partition 5,5
//   schedule 1f1b
//   global_batch 32
//   seed 1234
//   chunk_size 8
//   micro_batch_independent 0
//   optimizer adamw
//   keys module                (only for a model cut from one module: export's key names)
//   segments embed block0 block1 head
//   file seg-embed.pt 1048893 9a3c01f2
//   tensor param/wte.weight f32 [256,128] 192
//   ...
//   end 5d1e77a0
//
// Every file of the checkpoint is listed with its size and CRC-32C, followed by its tensors
// (name, dtype, shape, byte offset of the data), which is what a reader needs to read each
// tensor straight into place and what `mitra run` compares with the program's parameters. The `end` line carries the
// CRC-32C of everything before it, so a truncated or damaged manifest is detected. The shape
// (stages, replicas, partition, schedule) is recorded for the reader's information only:
// loading never needs it, because files are keyed by segment and parameter name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/torch_zip.h"
#include "mitra/common/status.h"

namespace mitra::checkpoint {

struct FileEntry {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  std::vector<TensorRecord> tensors;  // in file order

  const TensorRecord* FindTensor(const std::string& tensor) const;  // nullptr when absent
};

struct Manifest {
  int64_t step = 0;  // steps completed when it was written; training resumes at this step
  int stages = 1;
  int replicas = 1;
  std::string partition;
  std::string schedule;
  int64_t global_batch = 0;
  uint64_t seed = 0;
  // The micro-batch size; 0 when not recorded (checkpoints before it was). Part of the job's
  // math unless the model is micro-batch independent.
  int64_t chunk_size = 0;
  bool micro_batch_independent = false;
  std::string optimizer;  // its Name(); empty when not recorded (then it was AdamW)
  // "keys module": the model's state_dict() keys are the names within the segments
  // (cutpoint::ModelSpec::StateDictKeys::kModule); what `mitra checkpoint export` writes.
  bool module_keys = false;
  std::vector<std::string> segments;
  std::vector<FileEntry> files;

  std::string Serialize() const;
  // `where` names the file in error messages.
  static Result<Manifest> Parse(std::string_view text, const std::string& where);

  const FileEntry* FindFile(const std::string& name) const;
};

inline constexpr const char* kManifestName = "MANIFEST";

// "seg-<segment>.pt": the file holding a segment's parameters and optimizer state.
std::string SegmentFileName(const std::string& segment);
// The file holding the trainer's state (step, RNG, the settings a resume checks).
inline constexpr const char* kTrainerFileName = "trainer.pt";
// Whether a manifest may list `name`: kTrainerFileName or a SegmentFileName of a plain segment
// name (common/strings.h), a file in the manifest's own directory and nowhere else.
bool IsCheckpointFileName(std::string_view name);

// A file's lines as the manifest writes them ("file ..." then its "tensor ..." lines); workers
// send these to rank 0, which collects them into the manifest.
std::string FileLines(const FileEntry& file);
// Parses one "file" line (appending an entry) or "tensor" line (appending to the last entry).
Status ParseFileLine(const std::string& line, std::vector<FileEntry>* files);

}  // namespace mitra::checkpoint
