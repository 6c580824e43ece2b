// Fashion-MNIST (Debian's dataset-fashion-mnist) as a mitra dataset: 28 x 28 grey images of
// clothing in 10 classes, 60,000 for training and 10,000 for testing.
//
// Samples are {"image": float [1, 28, 28], normalised; "label": int64 scalar}. The files are
// read lazily, on the first Get(): a pipeline's middle stages, which never ask for samples,
// never read them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mitra/common/status.h"
#include "mitra/worker/data.h"

namespace mitra::examples {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int64_t kFashionClasses = 10;

class FashionMnist : public worker::Dataset {
 public:
  // `split` is "train" or "test"; `limit` > 0 keeps only the first `limit` samples. Checks that
  // the files exist and their headers (the sample count); the pixels are read on first use.
  static Result<std::shared_ptr<FashionMnist>> Open(const std::string& dir,
                                                    const std::string& split, int64_t limit = 0);

  int64_t Size() const override { return size_; }
  cutpoint::Activations Get(int64_t index) const override;

 private:
  FashionMnist(std::string images, std::string labels, int64_t size)
      : images_path_(std::move(images)), labels_path_(std::move(labels)), size_(size) {}
  void Load() const;

  std::string images_path_, labels_path_;
  int64_t size_;
  mutable std::once_flag loaded_;
  mutable std::vector<uint8_t> pixels_;  // size_ x 784
  mutable std::vector<uint8_t> labels_;
};

}  // namespace mitra::examples
