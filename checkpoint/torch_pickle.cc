#include "checkpoint/torch_pickle.h"

#include <cstdint>
#include <memory>
#include <string_view>

namespace mitra::checkpoint::detail {
namespace {

// Pickle opcodes used here (Python's pickletools names them).
constexpr char kProto = '\x80', kStop = '.', kMark = '(', kEmptyDict = '}', kSetItems = 'u',
               kBinUnicode = 'X', kGlobal = 'c', kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J',
               kLong1 = '\x8a', kEmptyTuple = ')', kTuple1 = '\x85', kTuple2 = '\x86',
               kTuple3 = '\x87', kTuple = 't', kNewFalse = '\x89', kReduce = 'R',
               kBinPersId = 'Q';

std::string_view StorageType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "FloatStorage";
    case DType::kFloat64: return "DoubleStorage";
    case DType::kFloat16: return "HalfStorage";
    case DType::kBFloat16: return "BFloat16Storage";
    case DType::kInt64: return "LongStorage";
    case DType::kInt32: return "IntStorage";
    case DType::kUInt8: return "ByteStorage";
    case DType::kBool: return "BoolStorage";
  }
  return "FloatStorage";
}

class Pickler {
 public:
  std::string& out() { return out_; }
  void Op(char op) { out_ += op; }
  void String(std::string_view s) {
    Op(kBinUnicode);
    Le(s.size(), 4);
    out_ += s;
  }
  void Global(std::string_view module, std::string_view name) {
    Op(kGlobal);
    out_.append(module).append("\n").append(name).append("\n");
  }
  void Int(int64_t v) {
    if (v >= 0 && v < 0x100) {
      Op(kBinInt1);
      Le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 0x10000) {
      Op(kBinInt2);
      Le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      Op(kBinInt);
      Le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    } else {
      Op(kLong1);  // little-endian two's complement, 8 bytes is always enough
      out_ += '\x08';
      Le(static_cast<uint64_t>(v), 8);
    }
  }
  void IntTuple(const std::vector<int64_t>& values) {
    if (values.size() > 3) Op(kMark);
    for (int64_t v : values) Int(v);
    static constexpr char kSmall[] = {kEmptyTuple, kTuple1, kTuple2, kTuple3};
    Op(values.size() <= 3 ? kSmall[values.size()] : kTuple);
  }

 private:
  void Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

void Tensor(Pickler& p, const TensorRecord& t, const std::string& key) {
  p.Global("torch._utils", "_rebuild_tensor_v2");
  p.Op(kMark);
  // The storage, by persistent id: ('storage', torch.<Type>Storage, key, 'cpu', numel).
  p.Op(kMark);
  p.String("storage");
  p.Global("torch", StorageType(t.dtype));
  p.String(key);
  p.String("cpu");
  p.Int(t.numel());
  p.Op(kTuple);
  p.Op(kBinPersId);
  p.Int(0);  // storage offset
  p.IntTuple(t.shape);
  std::vector<int64_t> strides(t.shape.size(), 1);
  for (size_t i = t.shape.size(); i-- > 1;) strides[i - 1] = strides[i] * t.shape[i];
  p.IntTuple(strides);
  p.Op(kNewFalse);  // requires_grad
  p.Global("collections", "OrderedDict");
  p.Op(kEmptyTuple);
  p.Op(kReduce);  // backward hooks: OrderedDict()
  p.Op(kTuple);
  p.Op(kReduce);
}

// A dict level: children in insertion order, each a tensor (index >= 0) or a nested dict.
struct Node {
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> children;
  int tensor = -1;

  Node* Child(const std::string& name) {
    for (auto& [n, child] : children) {
      if (n == name) return child.get();
    }
    children.emplace_back(name, std::make_unique<Node>());
    return children.back().second.get();
  }
};

void Dict(Pickler& p, const Node& node, const std::vector<TensorRecord>& tensors,
          const std::vector<std::string>& keys) {
  p.Op(kEmptyDict);
  if (node.children.empty()) return;
  p.Op(kMark);
  for (const auto& [name, child] : node.children) {
    p.String(name);
    if (child->tensor >= 0) {
      Tensor(p, tensors[child->tensor], keys[child->tensor]);
    } else {
      Dict(p, *child, tensors, keys);
    }
  }
  p.Op(kSetItems);
}

}  // namespace

std::string PickleTensorDict(const std::vector<TensorRecord>& tensors,
                             const std::vector<std::string>& keys, char nest_separator) {
  Node root;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Node* node = &root;
    std::string_view name = tensors[i].name;
    size_t cut;
    while (nest_separator != 0 && (cut = name.find(nest_separator)) != std::string_view::npos) {
      node = node->Child(std::string(name.substr(0, cut)));
      name.remove_prefix(cut + 1);
    }
    node->Child(std::string(name))->tensor = static_cast<int>(i);
  }
  Pickler p;
  p.Op(kProto);
  p.out() += '\x02';
  Dict(p, root, tensors, keys);
  p.Op(kStop);
  return std::move(p.out());
}

}  // namespace mitra::checkpoint::detail
