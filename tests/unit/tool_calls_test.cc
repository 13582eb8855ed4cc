// Tool calls (server/tool_calls.h): the request's tools, the grammar that
// enforces tool_choice required / named in each family's format, and the
// parsing of replies back into calls, whole and streamed.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include "base/json.h"
#include "sampling/grammar.h"
#include "server/json_schema_grammar.h"

namespace infera::server::tool_calls_test {
namespace {

using OJson = nlohmann::ordered_json;

const char kTools[] = R"({"tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "Weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                  "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city", "unit"],
                  "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now"}}]})";

ToolRequest Request(const std::string& extra = "") {
  OJson body = OJson::parse(kTools);
  if (!extra.empty()) body.update(OJson::parse(extra));
  ToolRequest r;
  EXPECT_TRUE(ParseToolRequest(body, &r).ok());
  return r;
}

std::string ErrorField(const std::string& body) {
  ToolRequest r;
  Status st = ParseToolRequest(OJson::parse(body), &r);
  if (st.ok()) return "";
  const std::string m(st.message());
  return m.substr(0, m.find(':'));
}

TEST(ToolRequest, ParsesToolsAndChoice) {
  ToolRequest r = Request();
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[1].parameters, OJson({{"type", "object"}}));
  EXPECT_EQ(r.choice, ToolRequest::Choice::kAuto);
  EXPECT_EQ(r.tools_json[0]["function"]["parameters"]["properties"].begin().key(), "city");  // order kept
  EXPECT_EQ(Request(R"({"tool_choice": {"type": "function", "function": {"name": "now"}}})").named, "now");
  EXPECT_FALSE(Request(R"({"parallel_tool_calls": false})").parallel);
  ToolRequest none;
  ASSERT_TRUE(ParseToolRequest(OJson::parse("{}"), &none).ok());
  EXPECT_FALSE(none.any());
  EXPECT_EQ(none.choice, ToolRequest::Choice::kNone);
}

TEST(ToolRequest, BadInputNamesTheField) {
  EXPECT_EQ(ErrorField(R"({"tools": {}})"), "tools");
  EXPECT_EQ(ErrorField(R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})"), "tools");
  EXPECT_EQ(ErrorField(R"({"tools": [{"type": "code", "function": {"name": "a"}}]})"), "tools");
  EXPECT_EQ(ErrorField(R"({"tools": [{"function": {"name": "a", "parameters": 3}}]})"), "tools");
  EXPECT_EQ(ErrorField(R"({"tools": [{"function": {"name": "a"}}, {"function": {"name": "a"}}]})"), "tools");
  EXPECT_EQ(ErrorField(R"({"tools": [{"function": {"name": "a", "extra": 1}}]})"), "tools");
  EXPECT_EQ(ErrorField(R"({"tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(ErrorField(R"({"tool_choice": "always"})"), "tool_choice");
  EXPECT_EQ(ErrorField(R"({"tools": [{"function": {"name": "a"}}], "tool_choice": {"type": "function",
                           "function": {"name": "b"}}})"), "tool_choice");
  EXPECT_EQ(ErrorField(R"({"parallel_tool_calls": 1})"), "parallel_tool_calls");
}

TEST(ToolCalls, DetectsTheTemplatesFormat) {
  EXPECT_EQ(DetectToolCallFormat("... <tool_call>\\n{\"name\": ..."), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("{{- \"[TOOL_CALLS] [\" }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat("<|start_header_id|>ipython ... tool_call"), ToolCallFormat::kLlama3);
  EXPECT_EQ(DetectToolCallFormat("{{ messages }}"), ToolCallFormat::kJson);
}

TEST(ToolCalls, ParsesEachFormat) {
  ParsedReply h = ParseToolCalls(ToolCallFormat::kHermes,
                                 "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                 "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
                                 "</tool_call>",
                                 1);
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.content, "Let me check.\n\n");
  EXPECT_EQ(h.calls[0].name, "get_weather");
  EXPECT_EQ(h.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_NE(h.calls[0].id, h.calls[1].id);
  // Not JSON inside the tags: it stays text.
  ParsedReply bad = ParseToolCalls(ToolCallFormat::kHermes, "a <tool_call>oops</tool_call> b", 1);
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "a <tool_call>oops</tool_call> b");

  ParsedReply l = ParseToolCalls(ToolCallFormat::kLlama3,
                                 "<|python_tag|>{\"name\": \"now\", \"parameters\": {\"tz\": \"UTC\"}}", 1);
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].arguments, R"({"tz":"UTC"})");
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kLlama3, R"({"name": "a", "parameters": {}}; {"name": "b", "parameters": {}})",
                           1).calls.size(), 2u);
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kLlama3, "{ not a call", 1).calls.empty());
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kLlama3, "Hello there", 1).content, "Hello there");

  ParsedReply m = ParseToolCalls(ToolCallFormat::kMistral,
                                 R"([TOOL_CALLS] [{"name": "now", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Rome"}}])",
                                 1);
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[0].id.size(), 9u);
  EXPECT_TRUE(m.content.empty());

  ParsedReply j = ParseToolCalls(ToolCallFormat::kJson, R"([{"name": "now", "parameters": {"a": [1, 2]}}])", 1);
  ASSERT_EQ(j.calls.size(), 1u);
  EXPECT_EQ(j.calls[0].arguments, R"({"a":[1,2]})");
  EXPECT_EQ(j.calls[0].id.rfind("call_", 0), 0u);
}

// Streaming gives the same content and calls as parsing the whole reply,
// however the text is cut, and content before a call is not held back.
TEST(ToolCalls, StreamEqualsWholeForEveryCut) {
  struct Case {
    ToolCallFormat f;
    std::string text;
  };
  const Case cases[] = {
      {ToolCallFormat::kHermes, "Checking <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call> done"},
      {ToolCallFormat::kHermes, "no call here, just <tool text"},
      {ToolCallFormat::kMistral, "Sure. [TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {\"x\": 1}}]"},
      {ToolCallFormat::kLlama3, "  <|python_tag|>{\"name\": \"now\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3, "Plain answer {with braces}"},
      {ToolCallFormat::kJson, "[{\"name\": \"now\", \"parameters\": {}}]"},
  };
  for (const Case& c : cases) {
    const ParsedReply whole = ParseToolCalls(c.f, c.text, 9);
    for (size_t step : {size_t{1}, size_t{2}, size_t{5}, c.text.size()}) {
      SCOPED_TRACE(c.text + " / step " + std::to_string(step));
      ToolCallStream s(c.f, 9);
      std::string content;
      for (size_t i = 0; i < c.text.size(); i += step) content += s.Feed(c.text.substr(i, step));
      ParsedReply end = s.Finish();
      content += end.content;
      EXPECT_EQ(content, whole.content);
      ASSERT_EQ(end.calls.size(), whole.calls.size());
      for (size_t k = 0; k < end.calls.size(); ++k) {
        EXPECT_EQ(end.calls[k].name, whole.calls[k].name);
        EXPECT_EQ(end.calls[k].arguments, whole.calls[k].arguments);
        EXPECT_EQ(end.calls[k].id, whole.calls[k].id);
      }
    }
  }
  ToolCallStream s(ToolCallFormat::kHermes, 1);
  EXPECT_EQ(s.Feed("Let me look. <tool"), "Let me look. ");  // "<tool" may start a call: held
  EXPECT_EQ(s.Feed("_call>\n{"), "");
}

bool Matches(const std::string& gbnf, const std::string& text) {
  auto g = Grammar::Parse(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << gbnf;
  if (!g.ok()) return false;
  GrammarMatcher m(*g);
  return m.AcceptBytes(text) && m.CanEnd();
}

TEST(ToolCalls, GrammarAdmitsOnlyValidCallsInTheFormat) {
  ToolRequest req = Request(R"({"tool_choice": "required"})");
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}})";
  auto hermes = ToolCallGrammar(ToolCallFormat::kHermes, req);
  ASSERT_TRUE(hermes.ok()) << hermes.status().ToString();
  EXPECT_TRUE(Matches(*hermes, "<tool_call>\n" + weather + "\n</tool_call>"));
  EXPECT_TRUE(Matches(*hermes, "<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
                               "\"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Matches(*hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                                "</tool_call>"));  // unit is required
  EXPECT_FALSE(Matches(*hermes, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Matches(*hermes, "Sure! <tool_call>\n" + weather + "\n</tool_call>"));

  ToolRequest one = Request(R"({"tool_choice": {"type": "function", "function": {"name": "now"}},
                                "parallel_tool_calls": false})");
  auto mistral = ToolCallGrammar(ToolCallFormat::kMistral, one);
  ASSERT_TRUE(mistral.ok());
  EXPECT_TRUE(Matches(*mistral, R"([TOOL_CALLS] [{"name": "now", "arguments": {}}])"));
  EXPECT_FALSE(Matches(*mistral, R"([TOOL_CALLS] [{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}])"));
  EXPECT_FALSE(Matches(*mistral, "[TOOL_CALLS] [" + weather + "]"));

  auto llama = ToolCallGrammar(ToolCallFormat::kLlama3, req);
  ASSERT_TRUE(llama.ok());
  EXPECT_TRUE(Matches(*llama, R"({"name": "now", "parameters": {"any": [1]}})"));
  auto json_named = ToolCallGrammar(ToolCallFormat::kJson, Request(R"({"tool_choice": {"type": "function",
                                                                       "function": {"name": "get_weather"}}})"));
  ASSERT_TRUE(json_named.ok());
  EXPECT_TRUE(Matches(*json_named, R"({"city": "Oslo", "unit": "f"})"));  // vLLM's named: the arguments alone
}

}  // namespace
}  // namespace infera::server::tool_calls_test

namespace infera::server::tool_calls_test {
namespace {

// A schema's properties are generated in the order the request gives them
// (OpenAI's structured outputs keep that order), not sorted.
TEST(JsonSchemaGrammar, PropertiesKeepTheSchemasOrder) {
  const auto schema = ParseOrderedJson(
      R"({"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
          "required": ["zeta", "alpha"]})");
  auto gbnf = JsonSchemaToGbnf(schema);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().ToString();
  EXPECT_TRUE(Matches(*gbnf, R"({"zeta": 1, "alpha": 2})"));
  EXPECT_FALSE(Matches(*gbnf, R"({"alpha": 2, "zeta": 1})"));
}

}  // namespace
}  // namespace infera::server::tool_calls_test
