// GBNF parsing and the grammar matcher: what each construct accepts and
// refuses, UTF-8 (code points cut between tokens), completion, errors.
#include "sampling/grammar.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace infera::grammar_test {
namespace {

std::shared_ptr<const Grammar> MustParse(const std::string& g) {
  auto r = Grammar::Parse(g);
  EXPECT_TRUE(r.ok()) << r.status().ToString() << "\n" << g;
  return r.ok() ? *r : nullptr;
}

// Whether the whole text is a sentence of the grammar.
bool Matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.CanEnd();
}
// Whether the text can be continued into a sentence.
bool Prefix(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.AcceptBytes(text);
}

TEST(GrammarTest, LiteralsAlternativesAndGroups) {
  auto g = MustParse(R"(root ::= "yes" | "no" | "may" ("be" | "hap")  # a comment
)");
  for (const char* ok : {"yes", "no", "maybe", "mayhap"}) EXPECT_TRUE(Matches(g, ok)) << ok;
  for (const char* bad : {"", "ye", "yess", "may", "maybee", "No"}) EXPECT_FALSE(Matches(g, bad)) << bad;
  EXPECT_TRUE(Prefix(g, "ma"));
  EXPECT_FALSE(Prefix(g, "x"));
}

TEST(GrammarTest, ClassesRepetitionAndRules) {
  auto g = MustParse(R"(
root  ::= ident ("," ws ident)* ws
ident ::= [a-zA-Z_] [a-zA-Z0-9_]{0,3}
ws    ::= [ \t\n]*
)");
  for (const char* ok : {"a", "abcd", "a, b", "x1,y2,   z_9  ", "_"}) EXPECT_TRUE(Matches(g, ok)) << ok;
  for (const char* bad : {"1a", "abcde", "a,", "a,,b", ""}) EXPECT_FALSE(Matches(g, bad)) << bad;
  auto n = MustParse(R"(root ::= [^"\\]+ "?"? [0-9]{2,} "!"{1,2})");
  EXPECT_TRUE(Matches(n, "hi?12!"));
  EXPECT_TRUE(Matches(n, "hi123!!"));
  EXPECT_FALSE(Matches(n, "hi1!"));
  EXPECT_FALSE(Matches(n, "h\"i12!"));
  EXPECT_FALSE(Matches(n, "hi12!!!"));
  auto any = MustParse(R"(root ::= "<" .* ">")");  // (greedy: > may appear inside)
  EXPECT_TRUE(Matches(any, "<a>b>"));
}

TEST(GrammarTest, CompletionAndMustEnd) {
  auto g = MustParse(R"(root ::= "a" "b"?)");
  GrammarMatcher m(g);
  EXPECT_FALSE(m.CanEnd());
  ASSERT_TRUE(m.AcceptBytes("a"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.MustEnd());
  ASSERT_TRUE(m.AcceptBytes("b"));
  EXPECT_TRUE(m.MustEnd());
  EXPECT_FALSE(m.AcceptBytes("b"));
  EXPECT_TRUE(m.MustEnd());  // a refused step leaves the state alone
}

TEST(GrammarTest, Utf8AcrossTokens) {
  auto g = MustParse(R"(root ::= "é" [α-ω]+ "\u00e9")");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptBytes("\xC3"));  // half of é
  EXPECT_FALSE(m.CanEnd());
  ASSERT_TRUE(m.AcceptBytes("\xA9\xCE"));  // its other half, half of α
  ASSERT_TRUE(m.AcceptBytes("\xB1"));
  EXPECT_FALSE(m.CanAccept("\xC3\xA8"));  // è
  EXPECT_FALSE(m.CanAccept("\xFF"));      // not UTF-8
  EXPECT_FALSE(m.CanAccept("\xD0"));      // a Cyrillic lead byte cannot become α-ω or é
  ASSERT_TRUE(m.AcceptBytes("\xC3\xA9"));
  EXPECT_TRUE(m.CanEnd());
}

TEST(GrammarTest, JsonLikeRecursion) {
  auto g = MustParse(R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? [0-9]+ ("." [0-9]+)?
ws     ::= [ \n]*
)");
  for (const char* ok : {R"({"a": [1, 2.5, {"b": null}], "c": "x\"y"})", "[]", "-3", R"({ })"}) {
    EXPECT_TRUE(Matches(g, ok)) << ok;
  }
  for (const char* bad : {R"({"a" 1})", "[1,]", "01x", R"({"a": tru})"}) EXPECT_FALSE(Matches(g, bad)) << bad;
  // Deep nesting stays cheap: the matcher keeps few stacks.
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_TRUE(Matches(g, deep));
}

TEST(GrammarTest, StateKeysNameEqualStates) {
  auto g = MustParse(R"(root ::= ("ab")* "c")");
  GrammarMatcher a(g), b(g);
  ASSERT_TRUE(a.AcceptBytes("ab"));
  ASSERT_TRUE(b.AcceptBytes("abab"));
  EXPECT_EQ(a.StateKey(), b.StateKey());
  ASSERT_TRUE(b.AcceptBytes("a"));
  EXPECT_NE(a.StateKey(), b.StateKey());
}

TEST(GrammarTest, ErrorsAreClear) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(root ::= foo)", "never defined"},
      {R"(start ::= "a")", "no 'root' rule"},
      {R"(root ::= "a)", "unterminated string"},
      {R"(root ::= [a-)", "unterminated character class"},
      {R"(root ::= ("a")", "expected ')'"},
      {R"(root ::= root "a" | "b")", "left-recursive"},
      {R"(root ::= x "a"
x ::= "" | root)", "left-recursive"},
      {R"(root ::= "a"{3,1})", "bad repetition"},
      {R"(root ::= "a"{5000})", "bad repetition"},
      {R"(root ::= "\q")", "unknown escape"},
      {R"(root ::= [z-a])", "backwards"},
      {R"(root ::= "a"
root ::= "b")", "defined twice"},
      {R"(root = "a")", "expected '::='"},
      {R"(root ::= @)", "unexpected '@'"},
      {R"(root ::= ("a"?){0,900})", "nest more than"},
  };
  // A long chain of rules that match nothing first (a hostile request).
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) chain += fmt::format("r{} ::= r{}\n", i, i + 1);
  chain += "r5000 ::= \"x\"\n";
  auto deep = Grammar::Parse(chain);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nest more than"), std::string::npos);
  for (const auto& [text, want] : cases) {
    auto r = Grammar::Parse(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << text << " -> " << r.status().message();
  }
}

}  // namespace
}  // namespace infera::grammar_test
