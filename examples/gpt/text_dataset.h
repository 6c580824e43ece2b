// TextDataset: a byte-level language-modelling dataset over real text files.
//
// The text of every regular file under a path (recursively, sorted by path; `*.dat` and `*.u8`
// skipped, which in Debian's fortunes package are indexes and UTF-8 duplicates) is concatenated.
// Sample i is the window [i*C, i*C + C + 1): "tokens" are its first C bytes, "targets" the last C.
#pragma once

#include <memory>
#include <string>

#include "mitra/common/status.h"
#include "mitra/worker/data.h"

namespace mitra::examples {

class TextDataset : public worker::Dataset {
 public:
  static Result<std::shared_ptr<TextDataset>> Load(const std::string& path, int64_t context);

  int64_t Size() const override { return size_; }
  cutpoint::Activations Get(int64_t index) const override;
  int64_t bytes() const { return bytes_.numel(); }

 private:
  TextDataset(torch::Tensor bytes, int64_t context);
  torch::Tensor bytes_;  // uint8
  int64_t context_;
  int64_t size_;
};

inline constexpr const char* kDefaultTextPath = "/usr/share/games/fortunes";

}  // namespace mitra::examples
