// The parsed form of a Jinja template: expressions and statements. Built by
// parser.cc, walked by interpreter.cc; immutable after parsing, so one
// Program may be rendered by many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace infera::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // [kids...]
    kTuple,     // (kids...) — a list at run time
    kDict,      // {keys[i]: kids[i]}
    kAttr,      // kids[0].name
    kIndex,     // kids[0][kids[1]]
    kSlice,     // kids[0][kids[1]:kids[2]:kids[3]] (null parts absent)
    kCall,      // kids[0](kids[1..], kwargs)
    kFilter,    // kids[0] | name(kids[1..], kwargs)
    kTest,      // kids[0] is [not] name(kids[1..])
    kUnary,     // op kids[0]: "-", "+", "not"
    kBinary,    // kids[0] op kids[1]: + - * / // % ** ~ and or
    kCompare,   // kids[0] ops[0] kids[1] ops[1] kids[2] ...: == != < <= > >= in notin
    kCond,      // kids[1] if kids[0] else kids[2] (kids[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;              // variable, attribute, filter or test name; the operator
  bool negated = false;          // kTest: "is not"
  std::vector<ExprPtr> kids;     // operands (null for absent slice parts)
  std::vector<ExprPtr> keys;     // kDict keys
  std::vector<std::string> ops;  // kCompare operators
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if cond]: bodies[0]; else_body
    kSet,       // set targets = expr, or set targets[0].attr = expr
    kSetBlock,  // {% set targets[0] %}bodies[0]{% endset %}, optional filter
    kMacro,     // macro name(params = defaults): bodies[0]
    kFilterBlock,  // {% filter expr %}bodies[0]{% endfilter %}: expr filters kLiteral placeholder
    kBreak,
    kContinue,
    kDo,        // {% do expr %}
    kScope,     // bodies[0] rendered as is ({% generation %} of transformers)
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::string name;   // macro name; kSet attribute name (empty: plain variable)
  ExprPtr expr;
  ExprPtr cond;       // kFor: inline filter
  std::vector<std::string> targets;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // per param; null when none
};

struct Program {
  Body body;
};

}  // namespace infera::jinja
