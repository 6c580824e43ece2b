#include "python/src/trainer_options.h"

#include <functional>
#include <memory>
#include <optional>

#include "python/src/py_activations.h"
#include "python/src/py_call.h"
#include "python/src/py_data.h"
#include "python/src/py_optimizer.h"
#include "python/src/py_spec.h"
#include "worker/option_table.h"

namespace mitra::python {
namespace {

using worker::OptionType;
using worker::OptionValue;
using worker::TrainerOption;

// A keyword's Python value as a value of the option's type; TypeError when it is not one.
OptionValue ValueFromPython(const TrainerOption& option, const py::handle& value) {
  const auto refuse = [&](const char* what) {
    RaisePython(PyExc_TypeError, "mitra.Trainer: " + option.name + " takes " + what + ", not " +
                                     py::cast<std::string>(py::repr(value)));
  };
  switch (option.type) {
    case OptionType::kWhole:
      if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value)) {
        refuse("a whole number");
      }
      return py::cast<int64_t>(value);
    case OptionType::kNumber:
      if (!(py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) ||
          py::isinstance<py::bool_>(value)) {
        refuse("a number");
      }
      return py::cast<double>(value);
    case OptionType::kSwitch:
      if (!py::isinstance<py::bool_>(value)) refuse("True or False");
      return py::cast<bool>(value);
    case OptionType::kPair:
      try {
        return py::cast<std::pair<double, double>>(value);
      } catch (const py::cast_error&) {
        refuse("two numbers");
      }
      break;
    case OptionType::kText:
    case OptionType::kName:
      if (!py::isinstance<py::str>(value)) refuse("a str");
      return py::cast<std::string>(value);
    case OptionType::kObject:
      break;
  }
  refuse("an object");
  return {};
}

py::object ValueToPython(const OptionValue& value) {
  struct ToPython {
    py::object operator()(int64_t n) const { return py::int_(n); }
    py::object operator()(double x) const { return py::float_(x); }
    py::object operator()(bool b) const { return py::bool_(b); }
    py::object operator()(const std::string& s) const { return py::str(s); }
    py::object operator()(const std::pair<double, double>& p) const {
      return py::make_tuple(p.first, p.second);
    }
  };
  return std::visit(ToPython{}, value);
}

// on_step: the Python callable, called with a mitra.StepInfo under the GIL.
std::function<void(const worker::StepInfo&)> StepHookFromPython(const py::object& fn) {
  PyRef hook(fn);
  return [hook](const worker::StepInfo& info) {
    CallPython("the step hook (on_step)", [&] { hook.get()(info); });
  };
}

// The keywords that take a program's object: a dataset, a function, or a factory instead of a
// built-in's name. True when `key` is one of them and `value` such an object (now read).
bool ReadObject(const std::string& key, const py::object& value, worker::TrainerOptions& out) {
  if (key == "eval_dataset") {
    out.eval.dataset = std::make_shared<PyDataset>(value);
  } else if (key == "metrics") {
    out.eval.metrics = MetricsFromPython(value);
  } else if (key == "on_step") {
    out.on_step = StepHookFromPython(value);
  } else if (key == "sampler" && !py::isinstance<py::str>(value)) {
    out.runtime.custom_sampler = SamplerFactoryFromPython(value);
  } else if (key == "optimizer" && !py::isinstance<py::str>(value)) {
    out.runtime.optimizer.custom = OptimizerFactoryFromPython(value);
  } else {
    return false;
  }
  return true;
}

}  // namespace

py::list TrainerOptionRows() {
  static const char* const kTypes[] = {"whole", "number", "switch", "text",
                                       "name",  "pair",   "object"};
  const worker::TrainerOptions defaults;
  py::list rows;
  for (const TrainerOption& o : worker::TrainerOptionTable()) {
    const std::optional<OptionValue> value = o.get ? o.get(defaults) : std::nullopt;
    py::dict row;
    row["name"] = o.name;
    row["type"] = kTypes[static_cast<int>(o.type)];
    row["help"] = o.help;
    row["note"] = o.note;
    row["instead"] = o.instead;
    row["default"] = value ? ValueToPython(*value) : py::none();
    rows.append(row);
  }
  return rows;
}

worker::TrainerOptions TrainerOptionsFromPython(const py::dict& options) {
  worker::TrainerOptions out;
  for (const auto& [key_object, value_handle] : options) {
    const std::string key = py::cast<std::string>(key_object);
    const py::object value = py::reinterpret_borrow<py::object>(value_handle);
    const TrainerOption* option = worker::FindTrainerOption(key);
    if (option == nullptr) {
      RaisePython(PyExc_KeyError, "mitra: unknown Trainer option '" + key + "'");
    }
    if (value.is_none() || ReadObject(key, value, out)) continue;
    const Status s = worker::SetTrainerOption(*option, ValueFromPython(*option, value), out);
    if (!s.ok()) RaisePython(PyExc_ValueError, "mitra.Trainer: " + key + ": " + s.message());
  }
  return out;
}

}  // namespace mitra::python
