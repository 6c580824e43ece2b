// The main() of a fuzz target built without libFuzzer: runs LLVMFuzzerTestOneInput once on each
// file named on the command line, or on every file of a named directory, so that the corpus is
// replayed by an ordinary build (tests/CMakeLists.txt). Arguments starting with '-' are
// libFuzzer flags and are ignored, so the same command line works for both builds.
//
// Exits 0 when every input ran; 1 when a path cannot be read or no input was found. An input
// that trips an invariant or crashes ends the process there; the last name printed is its file.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool Replay(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return false;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
  std::fflush(stdout);
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;
    std::error_code error;
    if (std::filesystem::is_directory(arg, error)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg, error)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());  // the same order every run
      for (const auto& file : files) {
        if (!Replay(file)) return 1;
        ++replayed;
      }
    } else {
      if (!Replay(arg)) return 1;
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "no inputs: pass files or directories of a corpus\n");
    return 1;
  }
  std::printf("replayed %zu inputs\n", replayed);
  return 0;
}
