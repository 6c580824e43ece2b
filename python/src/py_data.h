// A Python dataset and sampler as the runtime's worker::Dataset and worker::Sampler.
//
// A dataset is any object with __len__ and __getitem__(index) returning a dict of tensors (a
// torch.utils.data.Dataset written that way works as it is; numbers and NumPy arrays in it
// become tensors). A sampler is made by a Python
// callable (dataset_size, seed) -> object with index_at(position) -> int. Each call takes the
// GIL (py_call.h); the objects may be destroyed on any thread.
#pragma once

#include <pybind11/pybind11.h>

#include "mitra/worker/data.h"
#include "python/src/py_call.h"

namespace mitra::python {

class PyDataset : public worker::Dataset {
 public:
  // Needs the GIL; reads len(dataset) once (a TypeError names the fix when it has none).
  explicit PyDataset(py::object dataset);
  int64_t Size() const override { return size_; }
  cutpoint::Activations Get(int64_t index) const override;
  // A dataset with `prefetch_steps` (an int) and prefetch(indices) (mitra.loader.Loader) hears
  // of the samples of the steps ahead.
  int PrefetchSteps() const override { return prefetch_steps_; }
  void Prefetch(const std::vector<int64_t>& indices) const override;

 private:
  PyRef dataset_;
  int64_t size_ = 0;
  int prefetch_steps_ = 0;
};

// Needs the GIL.
worker::SamplerFactory SamplerFactoryFromPython(py::object factory);

}  // namespace mitra::python
