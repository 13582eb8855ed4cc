#include "jinja/interpreter.h"

#include <cmath>

#include "jinja/builtins.h"

namespace infera::jinja {
namespace {

std::string BinaryTypeError(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return std::string("an undefined value used with '") + op + "'";
  return std::string("unsupported operand type(s) for ") + op + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'";
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

std::string Interpreter::Render(const ValueDict& globals) {
  frames_.clear();
  frames_.emplace_back();
  for (const auto& [k, v] : globals) frames_[0][k] = v;
  frames_.emplace_back();
  std::string out;
  out_ = &out;
  ExecBody(program_.body);
  out_ = nullptr;
  return out;
}

void Interpreter::CountStep() {
  if (++steps_ > limits_.max_steps) throw JinjaError("the template ran too long (more than " +
                                                     std::to_string(limits_.max_steps) + " steps)");
}

void Interpreter::Append(const std::string& s) {
  if (out_->size() + s.size() > limits_.max_output_bytes) {
    throw JinjaError("the template's output is larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  *out_ += s;
}

Value Interpreter::Lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  return Value();
}

void Interpreter::Assign(const std::string& name, Value v) { frames_.back()[name] = std::move(v); }

std::string Interpreter::Capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    ExecBody(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Value Interpreter::FilterBlockText(const Expr& filters, Value text) {
  frames_.emplace_back();
  frames_.back()["\x01filter_body"] = std::move(text);  // the placeholder the parser put under the filters
  Value v;
  try {
    v = Eval(filters);
  } catch (...) {
    frames_.pop_back();
    throw;
  }
  frames_.pop_back();
  return v;
}

Interpreter::Flow Interpreter::ExecBody(const Body& body) {
  for (const NodePtr& n : body) {
    const Flow f = Exec(*n);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::Exec(const Node& n) {
  CountStep();
  switch (n.kind) {
    case Node::Kind::kText: Append(n.text); return Flow::kNormal;
    case Node::Kind::kOutput: Append(Eval(*n.expr).ToString()); return Flow::kNormal;
    case Node::Kind::kIf:
      for (size_t i = 0; i < n.conds.size(); ++i) {
        if (Eval(*n.conds[i]).Truthy()) return ExecBody(n.bodies[i]);
      }
      return ExecBody(n.else_body);
    case Node::Kind::kFor: return ExecFor(n);
    case Node::Kind::kSet: ExecSet(n); return Flow::kNormal;
    case Node::Kind::kSetBlock: {
      Value v = Value::Str(Capture(n.bodies[0]));
      Assign(n.targets[0], n.expr ? FilterBlockText(*n.expr, std::move(v)) : std::move(v));
      return Flow::kNormal;
    }
    case Node::Kind::kFilterBlock:
      Append(FilterBlockText(*n.expr, Value::Str(Capture(n.bodies[0]))).ToString());
      return Flow::kNormal;
    case Node::Kind::kMacro: Assign(n.name, MakeMacro(n)); return Flow::kNormal;
    case Node::Kind::kBreak: return Flow::kBreak;
    case Node::Kind::kContinue: return Flow::kContinue;
    case Node::Kind::kDo: Eval(*n.expr); return Flow::kNormal;
    case Node::Kind::kScope: return ExecBody(n.bodies[0]);
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecFor(const Node& n) {
  const Value seq = Eval(*n.expr);
  if (seq.is_none() || seq.is_number() || seq.is_callable() || seq.kind() == Value::Kind::kNamespace) {
    Fail(n.line, std::string("'") + seq.TypeName() + "' object is not iterable");
  }
  ValueList items = Iterate(seq);
  const auto bind = [&](const Value& item) {
    if (n.targets.size() == 1) {
      Assign(n.targets[0], item);
      return;
    }
    ValueList parts = item.is_list() ? item.list() : Iterate(item);
    if (parts.size() != n.targets.size()) {
      Fail(n.line, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                       std::to_string(n.targets.size()) + " loop variables");
    }
    for (size_t i = 0; i < parts.size(); ++i) Assign(n.targets[i], parts[i]);
  };
  if (n.cond) {  // {% for x in xs if cond %}: filter first, so loop.length counts the kept items
    ValueList kept;
    frames_.emplace_back();
    try {
      for (const Value& item : items) {
        CountStep();
        bind(item);
        if (Eval(*n.cond).Truthy()) kept.push_back(item);
      }
    } catch (...) {
      frames_.pop_back();
      throw;
    }
    frames_.pop_back();
    items = std::move(kept);
  }
  if (items.empty()) return ExecBody(n.else_body) == Flow::kBreak ? Flow::kBreak : Flow::kNormal;
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    CountStep();
    frames_.emplace_back();
    ValueDict loop = {
        {"index", Value::Int(i + 1)},
        {"index0", Value::Int(i)},
        {"revindex", Value::Int(len - i)},
        {"revindex0", Value::Int(len - i - 1)},
        {"first", Value::Bool(i == 0)},
        {"last", Value::Bool(i == len - 1)},
        {"length", Value::Int(len)},
        {"depth", Value::Int(1)},
        {"depth0", Value::Int(0)},
        {"previtem", i > 0 ? items[i - 1] : Value()},
        {"nextitem", i + 1 < len ? items[i + 1] : Value()},
        {"cycle", Value::Callable("cycle",
                                  [i](Interpreter&, const CallArgs& a) {
                                    if (a.positional.empty()) throw JinjaError("loop.cycle() needs arguments");
                                    return a.positional[static_cast<size_t>(i) % a.positional.size()];
                                  })},
    };
    frames_.back()["loop"] = Value::Dict(std::move(loop));
    Flow f;
    try {
      bind(items[i]);
      f = ExecBody(n.bodies[0]);
    } catch (...) {
      frames_.pop_back();
      throw;
    }
    frames_.pop_back();
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::ExecSet(const Node& n) {
  Value v = Eval(*n.expr);
  if (!n.name.empty()) {  // set ns.attr = v
    Value ns = Lookup(n.targets[0]);
    if (ns.kind() != Value::Kind::kNamespace) {
      Fail(n.line, "cannot assign attribute '" + n.name + "' on '" + n.targets[0] + "' (not a namespace)");
    }
    for (auto& [k, old] : ns.mutable_dict()) {
      if (k == n.name) {
        old = std::move(v);
        return;
      }
    }
    ns.mutable_dict().emplace_back(n.name, std::move(v));
    return;
  }
  if (n.targets.size() == 1) {
    Assign(n.targets[0], std::move(v));
    return;
  }
  ValueList parts = Iterate(v);
  if (parts.size() != n.targets.size()) Fail(n.line, "cannot unpack " + std::to_string(parts.size()) + " values");
  for (size_t i = 0; i < parts.size(); ++i) Assign(n.targets[i], parts[i]);
}

Value Interpreter::MakeMacro(const Node& n) {
  const Node* node = &n;
  return Value::Callable(n.name, [node](Interpreter& in, const CallArgs& args) {
    if (++in.call_depth_ > in.limits_.max_call_depth) throw JinjaError("macro calls nested too deeply");
    if (args.positional.size() > node->params.size()) {
      throw JinjaError("macro '" + node->name + "' takes " + std::to_string(node->params.size()) + " arguments");
    }
    // A macro sees the globals and the template's top level, not its caller's loops.
    std::vector<Frame> saved(in.frames_.begin() + 2, in.frames_.end());
    in.frames_.resize(2);
    in.frames_.emplace_back();
    Value result;
    try {
      for (size_t i = 0; i < node->params.size(); ++i) {
        const Value* a = args.Get(i, node->params[i]);
        in.Assign(node->params[i], a ? *a : node->defaults[i] ? in.Eval(*node->defaults[i]) : Value());
      }
      for (const auto& [k, v] : args.keyword) {
        bool known = false;
        for (const auto& p : node->params) known |= p == k;
        if (!known) throw JinjaError("macro '" + node->name + "' has no parameter '" + k + "'");
      }
      result = Value::Str(in.Capture(node->bodies[0]));
    } catch (...) {
      in.frames_.resize(2);
      in.frames_.insert(in.frames_.end(), saved.begin(), saved.end());
      --in.call_depth_;
      throw;
    }
    in.frames_.resize(2);
    in.frames_.insert(in.frames_.end(), saved.begin(), saved.end());
    --in.call_depth_;
    return result;
  });
}

Value Interpreter::Call(const Value& fn, const CallArgs& args) {
  CountStep();
  if (!fn.is_callable()) {
    throw JinjaError(fn.is_undefined() ? "call of an undefined function" : std::string("'") + fn.TypeName() +
                                                                              "' object is not callable");
  }
  return fn.function()(*this, args);
}

CallArgs Interpreter::EvalArgs(const Expr& e, size_t first_kid) {
  CallArgs a;
  for (size_t i = first_kid; i < e.kids.size(); ++i) a.positional.push_back(Eval(*e.kids[i]));
  for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, Eval(*v));
  return a;
}

Value Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.kids[0];
  if (callee.kind == Expr::Kind::kAttr) {
    Value obj = Eval(*callee.kids[0]);
    CallArgs args = EvalArgs(e, 1);
    Value out;
    if (CallMethod(*this, obj, callee.name, args, &out)) return out;
    Value fn = GetAttr(obj, callee.name);
    if (!fn.is_callable()) Fail(e.line, "'" + std::string(obj.TypeName()) + "' object has no method '" + callee.name + "'");
    return Call(fn, args);
  }
  Value fn = Eval(callee);
  if (fn.is_undefined() && callee.kind == Expr::Kind::kName) Fail(e.line, "'" + callee.name + "' is undefined");
  CallArgs args = EvalArgs(e, 1);
  try {
    return Call(fn, args);
  } catch (const JinjaError& err) {
    const std::string msg = err.what();
    if (msg.rfind("line ", 0) == 0) throw;
    Fail(e.line, msg);
  }
}

Value Interpreter::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      ValueList items;
      for (const auto& k : e.kids) items.push_back(Eval(*k));
      return e.kind == Expr::Kind::kTuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
    case Expr::Kind::kDict: {
      ValueDict items;
      for (size_t i = 0; i < e.kids.size(); ++i) {
        Value k = Eval(*e.keys[i]);
        if (!k.is_string()) Fail(e.line, "dict keys must be strings");
        Value v = Eval(*e.kids[i]);
        bool replaced = false;
        for (auto& [ek, ev] : items) {
          if (ek == k.str()) {
            ev = v;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(k.str(), std::move(v));
      }
      return Value::Dict(std::move(items));
    }
    case Expr::Kind::kAttr: {
      Value obj = Eval(*e.kids[0]);
      if (obj.is_undefined()) {
        const std::string what = e.kids[0]->kind == Expr::Kind::kName ? "'" + e.kids[0]->name + "'" : "a value";
        Fail(e.line, what + " is undefined (reading its attribute '" + e.name + "')");
      }
      return GetAttr(obj, e.name);
    }
    case Expr::Kind::kIndex: {
      Value obj = Eval(*e.kids[0]);
      Value key = Eval(*e.kids[1]);
      if (obj.is_undefined()) {
        const std::string what = e.kids[0]->kind == Expr::Kind::kName ? "'" + e.kids[0]->name + "'" : "a value";
        Fail(e.line, what + " is undefined (reading [" + key.Repr() + "])");
      }
      return GetItem(obj, key);
    }
    case Expr::Kind::kSlice: {
      Value obj = Eval(*e.kids[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (e.kids[1 + i]) parts[i] = Eval(*e.kids[1 + i]);
      }
      try {
        return Slice(obj, e.kids[1] ? &parts[0] : nullptr, e.kids[2] ? &parts[1] : nullptr,
                     e.kids[3] ? &parts[2] : nullptr);
      } catch (const JinjaError& err) {
        Fail(e.line, err.what());
      }
    }
    case Expr::Kind::kCall: return EvalCall(e);
    case Expr::Kind::kFilter: {
      Value v = Eval(*e.kids[0]);
      CallArgs args = EvalArgs(e, 1);
      try {
        return ApplyFilter(*this, e.name, v, args);
      } catch (const JinjaError& err) {
        const std::string msg = err.what();
        if (msg.rfind("line ", 0) == 0) throw;
        Fail(e.line, msg);
      }
    }
    case Expr::Kind::kTest: {
      Value v = Eval(*e.kids[0]);
      CallArgs args = EvalArgs(e, 1);
      bool r;
      try {
        r = ApplyTest(*this, e.name, v, args);
      } catch (const JinjaError& err) {
        Fail(e.line, err.what());
      }
      return Value::Bool(r != e.negated);
    }
    case Expr::Kind::kUnary: {
      Value v = Eval(*e.kids[0]);
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (!v.is_number()) Fail(e.line, std::string("bad operand type for unary ") + e.name + ": '" + v.TypeName() + "'");
      if (e.name == "+") return v.kind() == Value::Kind::kBool ? Value::Int(v.AsInt()) : v;
      return v.kind() == Value::Kind::kFloat ? Value::Float(-v.AsDouble()) : Value::Int(-v.AsInt());
    }
    case Expr::Kind::kBinary: return EvalBinary(e);
    case Expr::Kind::kCompare: return EvalCompare(e);
    case Expr::Kind::kCond:
      if (Eval(*e.kids[0]).Truthy()) return Eval(*e.kids[1]);
      return e.kids[2] ? Eval(*e.kids[2]) : Value();
  }
  return Value();
}

Value Interpreter::EvalBinary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value a = Eval(*e.kids[0]);
    return a.Truthy() ? Eval(*e.kids[1]) : a;
  }
  if (op == "or") {
    Value a = Eval(*e.kids[0]);
    return a.Truthy() ? a : Eval(*e.kids[1]);
  }
  const Value a = Eval(*e.kids[0]);
  const Value b = Eval(*e.kids[1]);
  if (op == "~") {
    std::string s = a.ToString() + b.ToString();
    if (s.size() > limits_.max_output_bytes) Fail(e.line, "string too long");
    return Value::Str(std::move(s));
  }
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat);
  if (op == "+") {
    if (nums) return floats ? Value::Float(a.AsDouble() + b.AsDouble()) : Value::Int(a.AsInt() + b.AsInt());
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > limits_.max_output_bytes) Fail(e.line, "string too long");
      return Value::Str(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      ValueList l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      if (l.size() > limits_.max_sequence) Fail(e.line, "list too long");
      return Value::List(std::move(l));
    }
    Fail(e.line, BinaryTypeError("+", a, b));
  }
  if (op == "*") {
    if (nums) return floats ? Value::Float(a.AsDouble() * b.AsDouble()) : Value::Int(a.AsInt() * b.AsInt());
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq != nullptr && count->is_number() && count->kind() != Value::Kind::kFloat) {
      const int64_t n = std::max<int64_t>(0, count->AsInt());
      const size_t unit = seq->is_string() ? seq->str().size() : seq->list().size();
      if (unit != 0 && static_cast<uint64_t>(n) > (seq->is_string() ? limits_.max_output_bytes : limits_.max_sequence) / unit) {
        Fail(e.line, "repetition too long");
      }
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < n; ++i) s += seq->str();
        return Value::Str(std::move(s));
      }
      ValueList l;
      for (int64_t i = 0; i < n; ++i) l.insert(l.end(), seq->list().begin(), seq->list().end());
      return Value::List(std::move(l));
    }
    Fail(e.line, BinaryTypeError("*", a, b));
  }
  if (!nums) Fail(e.line, BinaryTypeError(op.c_str(), a, b));
  if (op == "-") return floats ? Value::Float(a.AsDouble() - b.AsDouble()) : Value::Int(a.AsInt() - b.AsInt());
  if (op == "/") {
    if (b.AsDouble() == 0) Fail(e.line, "division by zero");
    return Value::Float(a.AsDouble() / b.AsDouble());
  }
  if (op == "//" || op == "%") {
    if (b.AsDouble() == 0) Fail(e.line, op == "%" ? "modulo by zero" : "division by zero");
    if (floats) {
      const double q = std::floor(a.AsDouble() / b.AsDouble());
      return op == "//" ? Value::Float(q) : Value::Float(a.AsDouble() - q * b.AsDouble());
    }
    const int64_t q = FloorDiv(a.AsInt(), b.AsInt());
    return op == "//" ? Value::Int(q) : Value::Int(a.AsInt() - q * b.AsInt());
  }
  if (op == "**") {
    if (!floats && b.AsInt() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.AsInt() && i < 64; ++i) r *= a.AsInt();
      return Value::Int(r);
    }
    return Value::Float(std::pow(a.AsDouble(), b.AsDouble()));
  }
  Fail(e.line, "unknown operator " + op);
}

Value Interpreter::EvalCompare(const Expr& e) {
  Value left = Eval(*e.kids[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.kids[i + 1]);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") {
      r = left.Equals(right);
    } else if (op == "!=") {
      r = !left.Equals(right);
    } else if (op == "in" || op == "notin") {
      try {
        r = Contains(right, left) == (op == "in");
      } catch (const JinjaError& err) {
        Fail(e.line, err.what());
      }
    } else {
      int c;
      if (left.is_number() && right.is_number()) {
        const double x = left.AsDouble(), y = right.AsDouble();
        c = x < y ? -1 : x > y ? 1 : 0;
      } else if (left.is_string() && right.is_string()) {
        c = left.str().compare(right.str());
      } else {
        Fail(e.line, "'" + op + "' not supported between instances of '" + left.TypeName() + "' and '" +
                         right.TypeName() + "'");
      }
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

}  // namespace infera::jinja
