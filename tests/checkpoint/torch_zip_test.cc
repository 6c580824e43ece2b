// Tensor files in PyTorch's zip format: written from memory, read back into place, checked,
// and (where Debian's python3-torch is installed) loaded by torch.load itself.
#include "checkpoint/torch_zip.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>

#include "checkpoint/crc32.h"
#include "checkpoint/crc32c.h"
#include "common/direct_file.h"
#include "tests/prerequisite.h"

namespace mitra::checkpoint {
namespace {
namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

class TorchZip : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mitra-zip-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A float matrix large enough to take the chunked path (3 MB), the trainer's kinds of
    // scalars, an empty tensor and a byte vector.
    big_.resize(768 * 1024);
    for (size_t i = 0; i < big_.size(); ++i) big_[i] = static_cast<float>(i) * 0.25f - 7.0f;
    small_ = {1.5, -2.25, 3.0};
    bytes_ = {0, 1, 2, 250, 255};
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result<WrittenFile> WriteSample(const std::string& path, TorchZipOptions options = {},
                                  const std::string& prefix = "") {
    auto writer = TorchZipWriter::Create(path, options);
    if (!writer.ok()) return writer.status();
    TorchZipWriter& w = **writer;
    for (Status s : {w.Add(prefix + "big", DType::kFloat32, {768, 1024}, big_.data()),
                     w.Add(prefix + "step", DType::kInt64, {}, &step_),
                     w.Add(prefix + "small", DType::kFloat64, {3}, small_.data()),
                     w.Add(prefix + "empty", DType::kFloat32, {0, 4}, nullptr),
                     w.Add(prefix + "bytes", DType::kUInt8, {5}, bytes_.data())}) {
      if (!s.ok()) return s;
    }
    return w.Finish();
  }

  std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
  std::vector<float> big_;
  std::vector<double> small_;
  std::vector<uint8_t> bytes_;
  int64_t step_ = 1234567890123;
};

TEST(Crc32cHardware, EqualsTheTableVersionAtEveryLengthAndAlignment) {
  std::string data(4096 + 17, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  for (size_t start : {0, 1, 3, 7}) {
    for (size_t len : {0, 1, 7, 8, 9, 63, 64, 1000, 4096}) {
      EXPECT_EQ(Crc32c(data.data() + start, len, 0x1234),
                detail::Crc32cPortable(data.data() + start, len, 0x1234))
          << start << " " << len;
    }
  }
}

TEST(Crc32Folding, EqualsZlibAtEveryLengthAndAlignment) {
  std::string data((1 << 16) + 64, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + i / 251 + 7);
  for (size_t start : {0, 1, 3, 15, 16}) {
    for (size_t len : {0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 4096, 65537}) {
      for (uint32_t crc : {0u, 0x12345678u}) {
        EXPECT_EQ(Crc32(data.data() + start, len, crc),
                  detail::Crc32Zlib(data.data() + start, len, crc))
            << start << " " << len;
      }
    }
  }
}

TEST_F(TorchZip, RecordsEveryTensorAlignedAndReadsEachStraightIntoPlace) {
  const std::string path = dir_ + "/t.pt";
  auto written = WriteSample(path);
  ASSERT_TRUE(written.ok()) << written.status().message();
  const std::string file = Slurp(path);
  EXPECT_EQ(written->bytes, file.size());
  EXPECT_EQ(written->crc32c, Crc32c(file));
  ASSERT_EQ(written->tensors.size(), 5u);
  for (const TensorRecord& t : written->tensors) EXPECT_EQ(t.offset % 64, 0u) << t.name;
  const TensorRecord& big = written->tensors[0];
  EXPECT_EQ(big.bytes(), big_.size() * 4);
  EXPECT_EQ(std::memcmp(file.data() + big.offset, big_.data(), big.bytes()), 0);
  EXPECT_EQ(file.substr(0, 4), std::string("PK\x03\x04", 4));

  std::map<std::string, std::vector<char>> into;
  Status read = ReadTensorFile(path, written->bytes, written->crc32c, written->tensors,
                               [&](const TensorRecord& t) -> void* {
                                 if (t.name == "small") return nullptr;  // skipped, still checked
                                 into[t.name].resize(t.bytes());
                                 return into[t.name].data();
                               });
  ASSERT_TRUE(read.ok()) << read.message();
  EXPECT_EQ(std::memcmp(into["big"].data(), big_.data(), big_.size() * 4), 0);
  int64_t step = 0;
  std::memcpy(&step, into["step"].data(), 8);
  EXPECT_EQ(step, step_);
  EXPECT_EQ(into.count("small"), 0u);
  EXPECT_EQ(std::vector<uint8_t>(into["bytes"].begin(), into["bytes"].end()), bytes_);
}

TEST_F(TorchZip, AFlippedOrMissingByteIsNamedWithTheFile) {
  const std::string path = dir_ + "/t.pt";
  auto written = WriteSample(path);
  ASSERT_TRUE(written.ok());
  auto discard = [](const TensorRecord&) -> void* { return nullptr; };
  for (uint64_t where : {uint64_t{10}, written->tensors[0].offset + 1000, written->bytes - 3}) {
    std::string file = Slurp(path);
    file[where] ^= 0x10;
    const std::string bad = dir_ + "/bad.pt";
    std::ofstream(bad, std::ios::binary) << file;
    Status s = ReadTensorFile(bad, written->bytes, written->crc32c, written->tensors, discard);
    ASSERT_FALSE(s.ok()) << where;
    EXPECT_NE(s.message().find(bad + " does not match its checksum"), std::string::npos)
        << s.message();
  }
  fs::resize_file(path, written->bytes - 1);
  Status s = ReadTensorFile(path, written->bytes, written->crc32c, written->tensors, discard);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
}

TEST_F(TorchZip, BadNamesAndAFullDiskAreClearErrors) {
  auto writer = TorchZipWriter::Create(dir_ + "/n.pt");
  ASSERT_TRUE(writer.ok());
  EXPECT_FALSE((*writer)->Add("two words", DType::kInt64, {}, &step_).ok());
  EXPECT_TRUE((*writer)->Add("a", DType::kInt64, {}, &step_).ok());
  EXPECT_FALSE((*writer)->Add("a", DType::kInt64, {}, &step_).ok());

  auto full = TorchZipWriter::Create("/dev/full");
  ASSERT_TRUE(full.ok());
  Status s = (*full)->Add("big", DType::kFloat32, {768, 1024}, big_.data());
  if (s.ok()) s = (*full)->Finish().status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/dev/full: No space left on device"), std::string::npos)
      << s.message();
}

// A large tensor starts at a page in the file in any case; when its memory does too it goes
// to the disk without a copy. The file does not depend on either.
TEST_F(TorchZip, LargeTensorsArePageAlignedAndTheFileIsTheSameInEitherMode) {
  float* aligned = static_cast<float*>(std::aligned_alloc(DirectFile::kAlignment, big_.size() * 4));
  std::unique_ptr<float, decltype(&std::free)> memory(aligned, &std::free);
  std::memcpy(aligned, big_.data(), big_.size() * 4);
  std::vector<std::string> files;
  for (bool direct : {true, false}) {
    for (float* data : {aligned, big_.data()}) {
      const std::string path = dir_ + "/t" + std::to_string(files.size()) + ".pt";
      TorchZipOptions options;
      options.direct = direct;
      auto writer = TorchZipWriter::Create(path, options);
      ASSERT_TRUE(writer.ok());
      ASSERT_TRUE((*writer)->Add("step", DType::kInt64, {}, &step_).ok());
      ASSERT_TRUE((*writer)->Add("big", DType::kFloat32, {768, 1024}, data).ok());
      auto written = (*writer)->Finish();
      ASSERT_TRUE(written.ok()) << written.status().message();
      EXPECT_EQ(written->tensors[1].offset % DirectFile::kAlignment, 0u);
      files.push_back(Slurp(path));
      EXPECT_EQ(written->crc32c, Crc32c(files.back()));
    }
  }
  for (const std::string& f : files) EXPECT_TRUE(f == files[0]);
}

// torch.load (and Python's zipfile, which checks every record's CRC-32) read what the writer
// wrote: flat, nested, and with zip64 fields forced on small records.
TEST_F(TorchZip, TorchLoadInPythonReadsTheValues) {
  MITRA_SKIP_WITHOUT(
      std::system((std::string(kPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0
          ? "python3-torch is not installed"
          : "");
  ASSERT_TRUE(WriteSample(dir_ + "/flat.pt").ok());
  ASSERT_TRUE(WriteSample(dir_ + "/nested.pt", {'/', 0xFFFFFFFFull}, "model/inner/").ok());
  ASSERT_TRUE(WriteSample(dir_ + "/zip64.pt", {0, 64}).ok());
  const std::string script = dir_ + "/check.py";
  std::ofstream(script) <<
      "import sys, zipfile, torch\n"
      "d = sys.argv[1]\n"
      "def check(t):\n"
      "    big = torch.arange(768 * 1024, dtype=torch.float32) * 0.25 - 7.0\n"
      "    assert t['big'].dtype == torch.float32 and t['big'].shape == (768, 1024)\n"
      "    assert torch.equal(t['big'].reshape(-1), big)\n"
      "    assert t['step'].dtype == torch.int64 and t['step'].dim() == 0\n"
      "    assert int(t['step']) == 1234567890123\n"
      "    assert t['small'].dtype == torch.float64 and t['small'].tolist() == [1.5, -2.25, 3.0]\n"
      "    assert t['empty'].shape == (0, 4)\n"
      "    assert t['bytes'].dtype == torch.uint8 and t['bytes'].tolist() == [0, 1, 2, 250, 255]\n"
      "for name in ('flat', 'nested', 'zip64'):\n"
      "    path = d + '/' + name + '.pt'\n"
      "    assert zipfile.ZipFile(path).testzip() is None, name\n"
      "    t = torch.load(path, weights_only=True)\n"
      "    check(t['model']['inner'] if name == 'nested' else t)\n"
      "print('loaded')\n";
  const std::string out = dir_ + "/out.txt";
  const int rc = std::system((std::string(kPython) + " " + script + " " + dir_ + " >" + out +
                              " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << Slurp(out);
  EXPECT_NE(Slurp(out).find("loaded"), std::string::npos) << Slurp(out);
}

// Found by fuzz/tensor_file_fuzz.cc and fuzz/manifest_fuzz.cc: what a damaged manifest can say
// about a tensor.
TEST(TensorRecord, ShapesWhoseByteCountWouldOverflowAreMalformed) {
  EXPECT_FALSE(ParseShape("[999999999999999,999999999999999]"));
  EXPECT_FALSE(ParseShape("[134217728,67108865]"));  // 2^53 + 2^27 elements
  ASSERT_TRUE(ParseShape("[134217728,67108864]"));   // 2^53
  EXPECT_FALSE(ParseShape("[999999999999999,0,999999999999999]"));
  const auto empty = ParseShape("[134217728,0,67108864]");
  ASSERT_TRUE(empty);
  EXPECT_EQ((TensorRecord{"t", DType::kFloat64, *empty, 0}.bytes()), 0u);
}

TEST_F(TorchZip, AnOffsetThatWrapsAroundIsOutsideTheFile) {
  const std::string path = dir_ + "/t.pt";
  std::ofstream(path, std::ios::binary) << std::string(256, 'x');
  const uint32_t crc = Crc32c(std::string(256, 'x'));
  bool asked = false;
  auto destination = [&](const TensorRecord&) -> void* {
    asked = true;
    return nullptr;
  };
  const TensorRecord wraps{"t", DType::kFloat32, {8}, ~uint64_t{0} - 15};
  Status s = ReadTensorFile(path, 256, crc, {wraps}, destination);
  EXPECT_NE(s.message().find("outside the file"), std::string::npos) << s.message();
  EXPECT_FALSE(asked);
}

TEST_F(TorchZip, AnEmptyTensorWhereAnotherStartsIsReadInEitherOrder) {
  const std::string path = dir_ + "/t.pt";
  const std::string file(256, 'x');
  std::ofstream(path, std::ios::binary) << file;
  const TensorRecord full{"full", DType::kUInt8, {5}, 64};
  const TensorRecord empty{"empty", DType::kUInt8, {0}, 64};
  std::vector<char> into(8);
  auto destination = [&](const TensorRecord&) -> void* { return into.data(); };
  for (const auto& tensors : {std::vector<TensorRecord>{full, empty},
                              std::vector<TensorRecord>{empty, full}}) {
    Status s = ReadTensorFile(path, file.size(), Crc32c(file), tensors, destination);
    EXPECT_TRUE(s.ok()) << s.message();
  }
}

}  // namespace
}  // namespace mitra::checkpoint
