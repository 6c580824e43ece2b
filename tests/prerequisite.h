// MITRA_SKIP_WITHOUT(reason): a test whose prerequisite this machine lacks (sshd, Python's
// torch, mounting a tmpfs) skips with `reason`, except under CI (CI=true), where it fails: a
// green CI run means every test ran. Use it in a test body or SetUp; "" means present.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace mitra::testing {

inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
}

}  // namespace mitra::testing

#define MITRA_SKIP_WITHOUT(reason)                                                             \
  do {                                                                                         \
    const std::string mitra_missing_ = (reason);                                               \
    if (mitra_missing_.empty()) break;                                                         \
    if (::mitra::testing::InCi()) {                                                            \
      GTEST_FAIL() << mitra_missing_ << " (CI=true: every test must run; scripts/setup "       \
                                        "installs what it needs)";                             \
    }                                                                                          \
    GTEST_SKIP() << mitra_missing_;                                                            \
  } while (0)
