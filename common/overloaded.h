// Overloaded: a visitor built from lambdas, one per alternative of a std::variant.
//
//   std::visit(Overloaded{[](const A& a) { ... }, [](const B& b) { ... }}, value);
#pragma once

namespace mitra {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace mitra
