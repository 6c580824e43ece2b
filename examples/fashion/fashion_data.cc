#include "examples/fashion/fashion_data.h"

#include <zlib.h>

#include <torch/torch.h>

namespace mitra::examples {
namespace {

constexpr int64_t kPixels = 28 * 28;
// The training set's mean and standard deviation of a pixel (in [0, 1]).
constexpr float kMean = 0.2860f, kStd = 0.3530f;

// Reads an IDX file (gzip): its big-endian dimensions, and with `data` the bytes that follow,
// at most `count` items of the first dimension.
Status ReadIdx(const std::string& path, uint32_t magic, std::vector<uint32_t>* dims,
               std::vector<uint8_t>* data = nullptr, int64_t count = 0) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status::NotFound("cannot open " + path + " (install Debian's dataset-fashion-mnist, "
                            "or pass --data DIR)");
  }
  auto read_u32 = [&](uint32_t* v) {
    unsigned char b[4];
    if (gzread(f, b, 4) != 4) return false;
    *v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    return true;
  };
  uint32_t got = 0;
  Status status;
  if (!read_u32(&got) || got != magic) {
    status = Status::InvalidArgument(path + " is not an IDX file of the expected kind");
  }
  for (uint32_t i = 0; status.ok() && i < (magic & 0xff); ++i) {
    uint32_t d = 0;
    if (!read_u32(&d)) status = Status::IoError(path + ": truncated header");
    dims->push_back(d);
  }
  if (status.ok() && data != nullptr) {
    int64_t item = 1;
    for (size_t i = 1; i < dims->size(); ++i) item *= (*dims)[i];
    data->resize(static_cast<size_t>(count * item));
    if (gzread(f, data->data(), static_cast<unsigned>(data->size())) !=
        static_cast<int>(data->size())) {
      status = Status::IoError(path + ": truncated data");
    }
  }
  gzclose(f);
  return status;
}

}  // namespace

Result<std::shared_ptr<FashionMnist>> FashionMnist::Open(const std::string& dir,
                                                         const std::string& split, int64_t limit) {
  if (split != "train" && split != "test") {
    return Status::InvalidArgument("unknown split '" + split + "' (expected train or test)");
  }
  const std::string prefix = dir + "/" + (split == "train" ? "train" : "t10k");
  const std::string images = prefix + "-images-idx3-ubyte.gz";
  const std::string labels = prefix + "-labels-idx1-ubyte.gz";
  std::vector<uint32_t> image_dims, label_dims;
  if (Status s = ReadIdx(images, 0x803, &image_dims); !s.ok()) return s;
  if (Status s = ReadIdx(labels, 0x801, &label_dims); !s.ok()) return s;
  if (image_dims[0] != label_dims[0] || image_dims[1] != 28 || image_dims[2] != 28) {
    return Status::InvalidArgument(images + " and " + labels + " do not hold the same number of "
                                   "28 x 28 images and labels");
  }
  int64_t size = image_dims[0];
  if (limit > 0) size = std::min(size, limit);
  return std::shared_ptr<FashionMnist>(new FashionMnist(images, labels, size));
}

void FashionMnist::Load() const {
  std::vector<uint32_t> dims;
  Status s = ReadIdx(images_path_, 0x803, &dims, &pixels_, size_);
  if (s.ok()) {
    dims.clear();
    s = ReadIdx(labels_path_, 0x801, &dims, &labels_, size_);
  }
  TORCH_CHECK(s.ok(), s.message());
}

cutpoint::Activations FashionMnist::Get(int64_t index) const {
  std::call_once(loaded_, [this] { Load(); });
  auto bytes = torch::from_blob(pixels_.data() + index * kPixels, {1, 28, 28}, torch::kUInt8);
  auto image = (bytes.to(torch::kFloat32) / 255.0f - kMean) / kStd;
  return {{"image", image}, {"label", torch::scalar_tensor(int64_t{labels_[index]}, torch::kInt64)}};
}

}  // namespace mitra::examples
