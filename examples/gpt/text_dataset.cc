#include "examples/gpt/text_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <torch/torch.h>

namespace mitra::examples {
namespace fs = std::filesystem;

Result<std::shared_ptr<TextDataset>> TextDataset::Load(const std::string& path, int64_t context) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::recursive_directory_iterator(path, ec)) {
      const auto ext = entry.path().extension();
      if (entry.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    return Status::NotFound("text data '" + path + "' is neither a file nor a directory: give "
                            "--data a text file, or install Debian's fortunes package");
  }
  std::vector<char> text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    text.insert(text.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (static_cast<int64_t>(text.size()) < context + 1) {
    return Status::InvalidArgument("text data '" + path + "' holds " + std::to_string(text.size()) +
                                   " bytes, fewer than one sample of " +
                                   std::to_string(context + 1) + ": give more text");
  }
  auto bytes = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(bytes.data_ptr<uint8_t>()));
  return std::shared_ptr<TextDataset>(new TextDataset(bytes, context));
}

TextDataset::TextDataset(torch::Tensor bytes, int64_t context)
    : bytes_(std::move(bytes)), context_(context), size_((bytes_.numel() - 1) / context) {}

cutpoint::Activations TextDataset::Get(int64_t index) const {
  TORCH_CHECK(index >= 0 && index < size_, "sample ", index, " is outside 0..", size_ - 1);
  auto window = bytes_.narrow(0, index * context_, context_ + 1).to(torch::kInt64);
  return {{"tokens", window.narrow(0, 0, context_)}, {"targets", window.narrow(0, 1, context_)}};
}

}  // namespace mitra::examples
