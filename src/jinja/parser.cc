#include "jinja/parser.h"

#include <cstring>
#include <string>
#include <vector>

#include "jinja/lexer.h"

namespace infera::jinja {
namespace {

// Nesting limits, so a hostile template (a per-request chat_template is user
// input) cannot exhaust the stack.
constexpr int kMaxExprDepth = 200;
constexpr int kMaxBlockDepth = 200;

// Recursive descent over the pieces; one Parser per template.
class Parser {
 public:
  explicit Parser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  std::unique_ptr<Program> Run() {
    auto prog = std::make_unique<Program>();
    std::string end_tag;
    prog->body = ParseBody({}, &end_tag);
    return prog;
  }

 private:
  // ---- statements ----

  // Parses until a block tag whose first word is in `stops` (left current,
  // its name in *stop) or the end of the template (only when stops is empty).
  Body ParseBody(const std::vector<std::string>& stops, std::string* stop) {
    if (++block_depth_ > kMaxBlockDepth) Fail(CurLine(), "blocks nested too deeply");
    Body body;
    while (piece_ < pieces_.size()) {
      Piece& p = pieces_[piece_];
      if (p.kind == Piece::Kind::kText) {
        auto n = NewNode(Node::Kind::kText, p.line);
        n->text = std::move(p.text);
        body.push_back(std::move(n));
        ++piece_;
        continue;
      }
      toks_ = &p.tokens;
      tok_ = 0;
      if (p.kind == Piece::Kind::kVar) {
        auto n = NewNode(Node::Kind::kOutput, p.line);
        n->expr = ParseExpr();
        ExpectEnd();
        body.push_back(std::move(n));
        ++piece_;
        continue;
      }
      if (Peek().kind != Token::Kind::kName) Fail(p.line, "expected a statement name after '{%'");
      const std::string word = Peek().text;
      for (const std::string& s : stops) {
        if (word == s) {
          *stop = word;
          --block_depth_;
          return body;
        }
      }
      ++tok_;
      ++piece_;
      body.push_back(ParseStatement(word, p.line));
    }
    if (!stops.empty()) Fail(CurLine(), "unexpected end of template; expected '{% " + stops.back() + " %}'");
    --block_depth_;
    return body;
  }

  // The current piece is the stop tag: consumes its name and returns.
  void EnterStopTag() {
    toks_ = &pieces_[piece_].tokens;
    tok_ = 1;
    ++piece_;
  }

  NodePtr ParseStatement(const std::string& word, int line) {
    if (word == "if") return ParseIf(line);
    if (word == "for") return ParseFor(line);
    if (word == "set") return ParseSet(line);
    if (word == "macro") return ParseMacro(line);
    if (word == "filter") {
      auto n = NewNode(Node::Kind::kFilterBlock, line);
      auto placeholder = NewExpr(Expr::Kind::kName, line);
      placeholder->name = "\x01filter_body";
      if (Peek().kind != Token::Kind::kName) Fail(line, "expected a filter name");
      auto f = NewExpr(Expr::Kind::kFilter, line);
      f->name = Next().text;
      f->kids.push_back(std::move(placeholder));
      if (Accept("(")) ParseCallArgs(f.get());
      n->expr = ParseFilterChain(std::move(f));
      ExpectEnd();
      n->bodies.push_back(ParseBlockUntil("endfilter", line));
      return n;
    }
    if (word == "break" || word == "continue") {
      ExpectEnd();
      return NewNode(word == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
    }
    if (word == "do") {
      auto n = NewNode(Node::Kind::kDo, line);
      n->expr = ParseExpr();
      ExpectEnd();
      return n;
    }
    if (word == "generation") {  // transformers' assistant-mask marker: renders its body
      ExpectEnd();
      auto n = NewNode(Node::Kind::kScope, line);
      n->bodies.push_back(ParseBlockUntil("endgeneration", line));
      return n;
    }
    if (word == "raw") Fail(line, "'raw' must stand alone in its tag");
    Fail(line, "unknown or unsupported statement '" + word + "'");
  }

  Body ParseBlockUntil(const std::string& end, int line) {
    std::string stop;
    Body b = ParseBody({end}, &stop);
    (void)line;
    EnterStopTag();
    ExpectEnd();
    return b;
  }

  NodePtr ParseIf(int line) {
    auto n = NewNode(Node::Kind::kIf, line);
    n->conds.push_back(ParseExpr());
    ExpectEnd();
    for (;;) {
      std::string stop;
      n->bodies.push_back(ParseBody({"elif", "else", "endif"}, &stop));
      EnterStopTag();
      if (stop == "elif") {
        n->conds.push_back(ParseExpr());
        ExpectEnd();
        continue;
      }
      ExpectEnd();
      if (stop == "else") {
        std::string end;
        n->else_body = ParseBody({"endif"}, &end);
        EnterStopTag();
        ExpectEnd();
      }
      return n;
    }
  }

  std::vector<std::string> ParseTargets() {
    std::vector<std::string> targets;
    do {
      if (Peek().kind != Token::Kind::kName) Fail(CurLine(), "expected a variable name");
      targets.push_back(Next().text);
    } while (Accept(","));
    return targets;
  }

  NodePtr ParseFor(int line) {
    auto n = NewNode(Node::Kind::kFor, line);
    const bool paren = Accept("(");
    n->targets = ParseTargets();
    if (paren) Expect(")");
    ExpectName("in");
    n->expr = ParseOrNoCond();
    if (AcceptName("if")) n->cond = ParseOrNoCond();
    if (AcceptName("recursive")) Fail(line, "recursive for loops are not supported");
    ExpectEnd();
    std::string stop;
    n->bodies.push_back(ParseBody({"else", "endfor"}, &stop));
    EnterStopTag();
    ExpectEnd();
    if (stop == "else") {
      std::string end;
      n->else_body = ParseBody({"endfor"}, &end);
      EnterStopTag();
      ExpectEnd();
    }
    return n;
  }

  NodePtr ParseSet(int line) {
    if (Peek().kind != Token::Kind::kName) Fail(line, "expected a variable name after 'set'");
    std::string first = Next().text;
    if (Accept(".")) {  // set ns.attr = value
      auto n = NewNode(Node::Kind::kSet, line);
      n->targets = {first};
      if (Peek().kind != Token::Kind::kName) Fail(line, "expected an attribute name");
      n->name = Next().text;
      Expect("=");
      n->expr = ParseTupleOrExpr();
      ExpectEnd();
      return n;
    }
    std::vector<std::string> targets = {first};
    while (Accept(",")) {
      if (Peek().kind != Token::Kind::kName) Fail(line, "expected a variable name");
      targets.push_back(Next().text);
    }
    if (Accept("=")) {
      auto n = NewNode(Node::Kind::kSet, line);
      n->targets = std::move(targets);
      n->expr = ParseTupleOrExpr();
      ExpectEnd();
      return n;
    }
    if (targets.size() != 1) Fail(line, "a block set takes one name");
    auto n = NewNode(Node::Kind::kSetBlock, line);
    n->targets = std::move(targets);
    if (PeekOp("|")) {
      auto placeholder = NewExpr(Expr::Kind::kName, line);
      placeholder->name = "\x01filter_body";
      n->expr = ParseFilterChain(std::move(placeholder));
    }
    ExpectEnd();
    n->bodies.push_back(ParseBlockUntil("endset", line));
    return n;
  }

  NodePtr ParseMacro(int line) {
    auto n = NewNode(Node::Kind::kMacro, line);
    if (Peek().kind != Token::Kind::kName) Fail(line, "expected a macro name");
    n->name = Next().text;
    Expect("(");
    if (!Accept(")")) {
      do {
        if (Peek().kind != Token::Kind::kName) Fail(line, "expected a parameter name");
        n->params.push_back(Next().text);
        n->defaults.push_back(Accept("=") ? ParseExpr() : nullptr);
      } while (Accept(","));
      Expect(")");
    }
    ExpectEnd();
    n->bodies.push_back(ParseBlockUntil("endmacro", line));
    return n;
  }

  // ---- expressions ----

  ExprPtr ParseTupleOrExpr() {
    ExprPtr first = ParseExpr();
    if (!PeekOp(",")) return first;
    auto t = NewExpr(Expr::Kind::kTuple, first->line);
    t->kids.push_back(std::move(first));
    while (Accept(",")) {
      if (Peek().kind == Token::Kind::kEnd) break;
      t->kids.push_back(ParseExpr());
    }
    return t;
  }

  ExprPtr ParseExpr() {
    DepthGuard g(this);
    ExprPtr e = ParseOr();
    while (AcceptName("if")) {
      auto c = NewExpr(Expr::Kind::kCond, e->line);
      c->kids.push_back(ParseOr());
      c->kids.push_back(std::move(e));
      c->kids.push_back(AcceptName("else") ? ParseExpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  // An expression without a trailing "if" (for-loop iterables and filters).
  ExprPtr ParseOrNoCond() {
    DepthGuard g(this);
    return ParseOr();
  }

  ExprPtr Binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = NewExpr(Expr::Kind::kBinary, a->line);
    e->name = op;
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (AcceptName("or")) e = Binary("or", std::move(e), ParseAnd());
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (AcceptName("and")) e = Binary("and", std::move(e), ParseNot());
    return e;
  }
  ExprPtr ParseNot() {
    if (PeekName("not")) {
      const int line = CurLine();
      ++tok_;
      DepthGuard g(this);
      auto e = NewExpr(Expr::Kind::kUnary, line);
      e->name = "not";
      e->kids.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr first = ParseMath1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (PeekOp("==") || PeekOp("!=") || PeekOp("<") || PeekOp("<=") || PeekOp(">") || PeekOp(">=")) {
        op = Next().text;
      } else if (PeekName("in")) {
        ++tok_;
        op = "in";
      } else if (PeekName("not") && tok_ + 1 < toks_->size() && (*toks_)[tok_ + 1].kind == Token::Kind::kName &&
                 (*toks_)[tok_ + 1].text == "in") {
        tok_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = NewExpr(Expr::Kind::kCompare, first->line);
        cmp->kids.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->kids.push_back(ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (PeekOp("+") || PeekOp("-")) {
      const std::string op = Next().text;
      e = Binary(op, std::move(e), ParseConcat());
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (Accept("~")) e = Binary("~", std::move(e), ParseMath2());
    return e;
  }
  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (PeekOp("*") || PeekOp("/") || PeekOp("//") || PeekOp("%")) {
      const std::string op = Next().text;
      e = Binary(op, std::move(e), ParsePow());
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary();
    while (Accept("**")) e = Binary("**", std::move(e), ParseUnary());
    return e;
  }
  // As Jinja2: "-3 | abs" is (-3) | abs; the operand of "-" takes no filters.
  ExprPtr ParseUnary(bool with_filter = true) {
    ExprPtr e;
    if (PeekOp("-") || PeekOp("+")) {
      const int line = CurLine();
      const std::string op = Next().text;
      DepthGuard g(this);
      e = NewExpr(Expr::Kind::kUnary, line);
      e->name = op;
      e->kids.push_back(ParseUnary(false));
    } else {
      e = ParsePostfix(ParsePrimary());
    }
    return with_filter ? ParseFilterChain(std::move(e)) : std::move(e);
  }

  // Filters ("| f(args)"), tests ("is [not] t args") and calls after them.
  ExprPtr ParseFilterChain(ExprPtr e) {
    for (;;) {
      if (Accept("|")) {
        if (Peek().kind != Token::Kind::kName) Fail(CurLine(), "expected a filter name after '|'");
        auto f = NewExpr(Expr::Kind::kFilter, e->line);
        f->name = Next().text;
        while (Accept(".")) f->name += "." + Next().text;
        f->kids.push_back(std::move(e));
        if (Accept("(")) ParseCallArgs(f.get());
        e = std::move(f);
      } else if (AcceptName("is")) {
        auto t = NewExpr(Expr::Kind::kTest, e->line);
        t->negated = AcceptName("not");
        if (Peek().kind != Token::Kind::kName) Fail(CurLine(), "expected a test name after 'is'");
        t->name = Next().text;
        t->kids.push_back(std::move(e));
        if (Accept("(")) {
          ParseCallArgs(t.get());
        } else if (StartsTestArgument()) {
          t->kids.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  bool StartsTestArgument() const {
    const Token& t = Peek();
    switch (t.kind) {
      case Token::Kind::kString:
      case Token::Kind::kInt:
      case Token::Kind::kFloat: return true;
      case Token::Kind::kName:
        return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "is" && t.text != "in" &&
               t.text != "not" && t.text != "if";
      case Token::Kind::kOp: return t.text == "[" || t.text == "{";
      default: return false;
    }
  }

  // After "(": positional and keyword arguments up to ")".
  void ParseCallArgs(Expr* call) {
    if (Accept(")")) return;
    do {
      if (PeekOp(")")) break;  // trailing comma
      if (Peek().kind == Token::Kind::kName && tok_ + 1 < toks_->size() && (*toks_)[tok_ + 1].kind == Token::Kind::kOp &&
          (*toks_)[tok_ + 1].text == "=") {
        std::string name = Next().text;
        ++tok_;
        call->kwargs.emplace_back(std::move(name), ParseExpr());
      } else {
        if (!call->kwargs.empty()) Fail(CurLine(), "positional argument after keyword argument");
        call->kids.push_back(ParseExpr());
      }
    } while (Accept(","));
    Expect(")");
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    for (;;) {
      if (Accept(".")) {
        if (Peek().kind == Token::Kind::kInt) {  // x.0 == x[0]
          auto ix = NewExpr(Expr::Kind::kIndex, e->line);
          ix->kids.push_back(std::move(e));
          auto lit = NewExpr(Expr::Kind::kLiteral, CurLine());
          lit->literal = Value::Int(Next().i);
          ix->kids.push_back(std::move(lit));
          e = std::move(ix);
          continue;
        }
        if (Peek().kind != Token::Kind::kName) Fail(CurLine(), "expected an attribute name after '.'");
        auto a = NewExpr(Expr::Kind::kAttr, e->line);
        a->name = Next().text;
        a->kids.push_back(std::move(e));
        e = std::move(a);
      } else if (Accept("[")) {
        DepthGuard g(this);
        ExprPtr parts[3];
        int colons = 0;
        if (!PeekOp(":")) parts[0] = ParseExpr();
        while (colons < 2 && Accept(":")) {
          ++colons;
          if (!PeekOp(":") && !PeekOp("]")) parts[colons] = ParseExpr();
        }
        Expect("]");
        if (colons == 0) {
          auto ix = NewExpr(Expr::Kind::kIndex, e->line);
          ix->kids.push_back(std::move(e));
          ix->kids.push_back(std::move(parts[0]));
          e = std::move(ix);
        } else {
          auto sl = NewExpr(Expr::Kind::kSlice, e->line);
          sl->kids.push_back(std::move(e));
          for (auto& p : parts) sl->kids.push_back(std::move(p));
          e = std::move(sl);
        }
      } else if (Accept("(")) {
        DepthGuard g(this);
        auto c = NewExpr(Expr::Kind::kCall, e->line);
        c->kids.push_back(std::move(e));
        ParseCallArgs(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr ParsePrimary() {
    const int line = CurLine();
    const Token& t = Peek();
    switch (t.kind) {
      case Token::Kind::kString: {
        auto e = NewExpr(Expr::Kind::kLiteral, line);
        std::string s = Next().text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // "a" "b" concatenates
        e->literal = Value::Str(std::move(s));
        return e;
      }
      case Token::Kind::kInt: {
        auto e = NewExpr(Expr::Kind::kLiteral, line);
        e->literal = Value::Int(Next().i);
        return e;
      }
      case Token::Kind::kFloat: {
        auto e = NewExpr(Expr::Kind::kLiteral, line);
        e->literal = Value::Float(Next().d);
        return e;
      }
      case Token::Kind::kName: {
        const std::string name = Next().text;
        auto e = NewExpr(Expr::Kind::kLiteral, line);
        if (name == "true" || name == "True") {
          e->literal = Value::Bool(true);
        } else if (name == "false" || name == "False") {
          e->literal = Value::Bool(false);
        } else if (name == "none" || name == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = name;
        }
        return e;
      }
      case Token::Kind::kOp: {
        DepthGuard g(this);
        if (Accept("(")) {
          if (Accept(")")) return NewExpr(Expr::Kind::kTuple, line);
          ExprPtr first = ParseExpr();
          if (Accept(")")) return first;
          auto tup = NewExpr(Expr::Kind::kTuple, line);
          tup->kids.push_back(std::move(first));
          while (Accept(",")) {
            if (PeekOp(")")) break;
            tup->kids.push_back(ParseExpr());
          }
          Expect(")");
          return tup;
        }
        if (Accept("[")) {
          auto list = NewExpr(Expr::Kind::kList, line);
          while (!Accept("]")) {
            list->kids.push_back(ParseExpr());
            if (!Accept(",")) {
              Expect("]");
              break;
            }
          }
          return list;
        }
        if (Accept("{")) {
          auto dict = NewExpr(Expr::Kind::kDict, line);
          while (!Accept("}")) {
            dict->keys.push_back(ParseExpr());
            Expect(":");
            dict->kids.push_back(ParseExpr());
            if (!Accept(",")) {
              Expect("}");
              break;
            }
          }
          return dict;
        }
        Fail(line, "unexpected '" + t.text + "'");
      }
      case Token::Kind::kEnd: Fail(line, "unexpected end of expression");
    }
    Fail(line, "unexpected token");
  }

  // ---- tokens ----

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->expr_depth_ > kMaxExprDepth) Fail(p->CurLine(), "expression nested too deeply");
    }
    ~DepthGuard() { --p->expr_depth_; }
    Parser* p;
  };

  int CurLine() const {
    if (piece_ < pieces_.size()) return pieces_[piece_].line;
    return pieces_.empty() ? 1 : pieces_.back().line;
  }
  const Token& Peek() const { return (*toks_)[tok_]; }
  Token& Next() {
    Token& t = (*toks_)[tok_];
    if (t.kind != Token::Kind::kEnd) ++tok_;
    return t;
  }
  bool PeekOp(const char* op) const { return Peek().kind == Token::Kind::kOp && Peek().text == op; }
  bool PeekName(const char* n) const { return Peek().kind == Token::Kind::kName && Peek().text == n; }
  bool Accept(const char* op) {
    if (!PeekOp(op)) return false;
    ++tok_;
    return true;
  }
  bool AcceptName(const char* n) {
    if (!PeekName(n)) return false;
    ++tok_;
    return true;
  }
  void Expect(const char* op) {
    if (!Accept(op)) Fail(CurLine(), std::string("expected '") + op + "', got '" + Describe(Peek()) + "'");
  }
  void ExpectName(const char* n) {
    if (!AcceptName(n)) Fail(CurLine(), std::string("expected '") + n + "', got '" + Describe(Peek()) + "'");
  }
  void ExpectEnd() {
    if (Peek().kind != Token::Kind::kEnd) Fail(CurLine(), "unexpected '" + Describe(Peek()) + "' at the end of a tag");
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd: return "end of tag";
      case Token::Kind::kString: return "'" + t.text + "'";
      case Token::Kind::kInt: return std::to_string(t.i);
      case Token::Kind::kFloat: return FormatFloat(t.d);
      default: return t.text;
    }
  }

  static NodePtr NewNode(Node::Kind k, int line) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }
  static ExprPtr NewExpr(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  std::vector<Piece> pieces_;
  size_t piece_ = 0;
  std::vector<Token>* toks_ = nullptr;
  size_t tok_ = 0;
  int expr_depth_ = 0;
  int block_depth_ = 0;
};

}  // namespace

std::unique_ptr<Program> ParseTemplate(std::string_view source) {
  // Jinja2 drops one trailing newline of the source (keep_trailing_newline=False).
  if (source.size() >= 2 && source.substr(source.size() - 2) == "\r\n") {
    source.remove_suffix(2);
  } else if (!source.empty() && source.back() == '\n') {
    source.remove_suffix(1);
  }
  return Parser(Lex(source)).Run();
}

}  // namespace infera::jinja
