// Runs a parsed Program against a set of global variables. One Interpreter
// per render; not thread-safe (the Program it reads is, so many renders may
// share one).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace infera::jinja {

// Bounds on one render, so a hostile template cannot run forever or fill
// memory. Exceeding one is a JinjaError.
struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  int64_t max_steps = 1'000'000;  // statements, loop iterations and calls
  int max_call_depth = 100;        // macro calls nested
  size_t max_sequence = 1'000'000; // elements one list / range / repetition may hold
};

class Interpreter {
 public:
  Interpreter(const Program& program, const RenderLimits& limits) : program_(program), limits_(limits) {}

  // Throws JinjaError.
  std::string Render(const ValueDict& globals);

  // For builtins: calls a callable value; counts a step.
  Value Call(const Value& fn, const CallArgs& args);
  void CountStep();
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = std::unordered_map<std::string, Value>;

  Flow ExecBody(const Body& body);
  Flow Exec(const Node& n);
  Flow ExecFor(const Node& n);
  void ExecSet(const Node& n);
  Value MakeMacro(const Node& n);
  std::string Capture(const Body& body);
  // {% filter f %} / {% set x | f %}: the filter chain applied to `text`.
  Value FilterBlockText(const Expr& filters, Value text);

  Value Eval(const Expr& e);
  Value EvalCall(const Expr& e);
  Value EvalBinary(const Expr& e);
  Value EvalCompare(const Expr& e);
  CallArgs EvalArgs(const Expr& e, size_t first_kid);

  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value v);
  void Append(const std::string& s);

  const Program& program_;
  RenderLimits limits_;
  std::vector<Frame> frames_;  // [0] globals, [1] template top level, then loops / macro calls
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace infera::jinja
