#include "python/src/py_data.h"

#include <memory>

#include <pybind11/stl.h>

#include "python/src/py_activations.h"

namespace mitra::python {

PyDataset::PyDataset(py::object dataset) {
  if (!py::hasattr(dataset, "__len__") || !py::hasattr(dataset, "__getitem__")) {
    RaisePython(PyExc_TypeError,
                "the dataset, a " + py::cast<std::string>(py::type::of(dataset).attr("__name__")) +
                    ", needs __len__() and __getitem__(index) returning a dict of tensors");
  }
  size_ = static_cast<int64_t>(py::len(dataset));
  if (py::hasattr(dataset, "prefetch_steps") && py::hasattr(dataset, "prefetch")) {
    prefetch_steps_ = py::cast<int>(dataset.attr("prefetch_steps"));
  }
  dataset_ = PyRef(std::move(dataset));
}

void PyDataset::Prefetch(const std::vector<int64_t>& indices) const {
  CallPython("the loader's prefetch", [&] { dataset_.get().attr("prefetch")(py::cast(indices)); });
}

cutpoint::Activations PyDataset::Get(int64_t index) const {
  const std::string what = "the dataset's __getitem__(" + std::to_string(index) + ")";
  return CallPython(what, [&] {
    return SampleFromPython(dataset_.get()[py::int_(index)], what + " returned");
  });
}

namespace {

class PySampler : public worker::Sampler {
 public:
  explicit PySampler(PyRef sampler) : sampler_(std::move(sampler)) {}
  int64_t IndexAt(int64_t position) override {
    return CallPython("the sampler's index_at(" + std::to_string(position) + ")", [&] {
      return py::cast<int64_t>(sampler_.get().attr("index_at")(position));
    });
  }

 private:
  PyRef sampler_;
};

}  // namespace

worker::SamplerFactory SamplerFactoryFromPython(py::object factory) {
  PyRef ref(std::move(factory));
  return [ref](int64_t dataset_size, uint64_t seed) -> std::unique_ptr<worker::Sampler> {
    return CallPython("the sampler factory", [&] {
      py::object sampler = ref.get()(dataset_size, seed);
      if (!py::hasattr(sampler, "index_at")) {
        RaisePython(PyExc_TypeError, "the sampler factory returned a " +
                                         py::cast<std::string>(py::type::of(sampler).attr("__name__")) +
                                         " without index_at(position) -> dataset index");
      }
      return std::make_unique<PySampler>(PyRef(std::move(sampler)));
    });
  };
}

}  // namespace mitra::python
