// The Python GPT (examples/python/gpt_train.py) as an elastic test job, for the tests that run
// it under `mitra run` locally, over SSH and under Slurm. Needs MITRA_PYTHON_GPT_TRAIN (the
// script), MITRA_PYTHON_EXTENSION (the built extension) and MITRA_PYTHON_PATH (the build's
// package folder) defined by tests/CMakeLists.txt.
#pragma once

#include <stdlib.h>

#include <string>

#include "tests/worker/elastic_job.h"

namespace mitra::testing {

inline constexpr char kPython[] = "/usr/bin/python3";  // the interpreter with Debian's torch

// The tiny GPT with dropout, seeded like GptArgs(): `steps` steps of `batch` samples. Local
// workers (and srun's) inherit the test process's environment: it names this build's package.
inline ElasticJob PythonGptJob(int64_t batch, int64_t steps) {
  ::setenv("PYTHONPATH", MITRA_PYTHON_PATH, /*overwrite=*/1);
  ElasticJob job{batch, steps};
  job.program = {kPython, MITRA_PYTHON_GPT_TRAIN, "--model", "tiny", "--seed", "11", "--lr",
                 "1e-3", "--dropout", "0.1"};
  job.depends_on = {MITRA_PYTHON_GPT_TRAIN, MITRA_PYTHON_EXTENSION};
  return job;
}

// `mitra run --env` for workers on machines that do not inherit the manager's environment.
inline std::string PythonPathSetting() { return std::string("PYTHONPATH=") + MITRA_PYTHON_PATH; }

}  // namespace mitra::testing
