// OpenAI's Responses API, translated: input items -> chat messages, the
// request's settings -> a chat request, previous_response_id through the
// store, refusals; the response object's items and fields; the store's
// eviction.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/responses_api.h"

namespace infera::server::responses_test {
namespace {

using ojson = nlohmann::ordered_json;

struct Translated {
  bool ok = false;
  ojson chat;
  ResponsesTurn turn;
  ApiError err;
};

Translated Translate(const ojson& body, ResponsesStore* store = nullptr, bool count = false) {
  Translated t;
  t.ok = ResponsesToChatRequest(body.dump(), store, count, "abc", &t.turn, &t.err);
  if (t.ok) t.chat = ojson::parse(t.turn.chat_body);
  return t;
}

TEST(ResponsesApi, StringInputWithInstructionsAndSettings) {
  Translated t = Translate({{"model", "m"},
                            {"input", "Hello"},
                            {"instructions", "Be brief."},
                            {"max_output_tokens", 7},
                            {"temperature", 0},
                            {"user", "u1"},
                            {"metadata", {{"k", "v"}}}});
  ASSERT_TRUE(t.ok) << t.err.ToJson();
  EXPECT_EQ(t.chat["messages"], ojson::parse(R"([{"role":"system","content":"Be brief."},
                                                 {"role":"user","content":"Hello"}])"));
  EXPECT_EQ(t.chat["max_tokens"], 7);
  EXPECT_EQ(t.chat["temperature"], 0);
  EXPECT_EQ(t.chat["user"], "u1");
  EXPECT_EQ(t.chat["model"], "m");
  // The response object repeats the settings, defaults filled in.
  EXPECT_EQ(t.turn.echo["instructions"], "Be brief.");
  EXPECT_EQ(t.turn.echo["max_output_tokens"], 7);
  EXPECT_EQ(t.turn.echo["metadata"]["k"], "v");
  EXPECT_EQ(t.turn.echo["top_p"], 1.0);
  EXPECT_EQ(t.turn.echo["tool_choice"], "auto");
  EXPECT_TRUE(t.turn.store);
  // The instructions are not part of the conversation a follow-up continues.
  EXPECT_EQ(t.turn.history, ojson::parse(R"([{"role":"user","content":"Hello"}])"));
  ASSERT_EQ(t.turn.input_items.size(), 1u);
  EXPECT_EQ(t.turn.input_items[0]["id"], "msg_abc_0");
  EXPECT_EQ(t.turn.input_items[0]["content"][0]["type"], "input_text");
}

TEST(ResponsesApi, ItemsBecomeMessagesToolCallsAndToolResults) {
  const ojson input = ojson::parse(R"([
    {"role": "developer", "content": "Rules."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                   {"type": "input_text", "text": "in Paris?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
    {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
    {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny at noon."}]}
  ])");
  Translated t = Translate({{"input", input}});
  ASSERT_TRUE(t.ok) << t.err.ToJson();
  const ojson want = ojson::parse(R"([
    {"role": "system", "content": "Rules."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
    {"role": "assistant", "content": "Sunny at noon."}
  ])");
  EXPECT_EQ(t.chat["messages"], want);
  ASSERT_EQ(t.turn.input_items.size(), input.size());
  EXPECT_EQ(t.turn.input_items[2]["id"], "rs_1");  // given ids are kept
  EXPECT_EQ(t.turn.input_items[3]["id"], "item_abc_3");
}

TEST(ResponsesApi, ToolsToolChoiceTextFormatAndLogprobs) {
  const ojson schema = ojson::parse(R"({"type": "object", "properties": {"z": {"type": "string"},
                                                                       "a": {"type": "integer"}}})");
  Translated t = Translate(
      {{"input", "x"},
       {"tools", ojson::parse(R"([{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true},
                                  {"type": "function", "name": "g", "description": "G"}])")},
       {"tool_choice", ojson::parse(R"({"type": "allowed_tools", "mode": "required",
                                        "tools": [{"type": "function", "name": "g"}]})")},
       {"text", {{"format", {{"type", "json_schema"}, {"name", "out"}, {"schema", schema}, {"strict", true}}}}},
       {"top_logprobs", 3},
       {"include", {"message.output_text.logprobs", "reasoning.encrypted_content"}}});
  ASSERT_TRUE(t.ok) << t.err.ToJson();
  // allowed_tools narrows the tools; its mode is the chat tool_choice.
  ASSERT_EQ(t.chat["tools"].size(), 1u);
  EXPECT_EQ(t.chat["tools"][0]["function"]["name"], "g");
  EXPECT_EQ(t.chat["tools"][0]["function"]["description"], "G");
  EXPECT_EQ(t.chat["tool_choice"], "required");
  // The schema keeps its key order (the order the constrained output follows).
  EXPECT_EQ(t.chat["response_format"]["json_schema"]["schema"].dump(), schema.dump());
  EXPECT_EQ(t.chat["response_format"]["json_schema"]["name"], "out");
  EXPECT_EQ(t.chat["logprobs"], true);
  EXPECT_EQ(t.chat["top_logprobs"], 3);
  EXPECT_TRUE(t.turn.logprobs);

  Translated named = Translate({{"input", "x"},
                                {"tools", ojson::parse(R"([{"type": "function", "name": "f"}])")},
                                {"tool_choice", {{"type", "function"}, {"name", "f"}}}});
  ASSERT_TRUE(named.ok);
  EXPECT_EQ(named.chat["tool_choice"], ojson::parse(R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(named.chat["tools"][0]["function"]["parameters"], ojson::parse(R"({"type": "object"})"));
  // top_logprobs alone asks for nothing (OpenAI returns logprobs only when included).
  Translated plain = Translate({{"input", "x"}, {"top_logprobs", 2}});
  ASSERT_TRUE(plain.ok);
  EXPECT_FALSE(plain.chat.contains("logprobs"));
}

TEST(ResponsesApi, RefusesWhatItCannotDo) {
  auto refused = [](const ojson& body, const std::string& param) {
    Translated t = Translate(body);
    EXPECT_FALSE(t.ok) << body.dump();
    EXPECT_EQ(t.err.status, 400) << body.dump();
    EXPECT_EQ(t.err.param, param) << body.dump() << " " << t.err.ToJson();
    EXPECT_FALSE(t.err.message.empty());
  };
  refused({{"input", ojson::parse(R"([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])")}},
          "input");
  refused({{"input", "x"}, {"tools", ojson::parse(R"([{"type": "web_search"}])")}}, "tools");
  refused({{"input", "x"}, {"background", true}}, "background");
  refused({{"input", "x"}, {"truncation", "auto"}}, "truncation");
  refused({{"input", "x"}, {"conversation", "conv_1"}}, "conversation");
  refused({{"input", "x"}, {"max_tool_calls", 2}}, "max_tool_calls");
  refused({{"input", "x"}, {"frobnicate", 1}}, "frobnicate");
  refused({{"input", "x"}, {"include", {"nonsense"}}}, "include");
  refused({{"input", "x"}, {"top_logprobs", 21}}, "top_logprobs");
  refused({{"input", ojson::array()}}, "input");
  refused({{"model", "m"}}, "input");
  refused({{"input", ojson::parse(R"([{"type": "item_reference", "id": "msg_1"}])")}}, "input");
  refused({{"input", "x"}, {"text", {{"format", {{"type", "grammar"}}}}}}, "text.format");
  refused({{"input", "x"}, {"tool_choice", {{"type", "file_search"}}}}, "tool_choice");
  refused({{"input", "x"}, {"metadata", {{"k", 1}}}}, "metadata");
  // Settings that only name a default are fine.
  EXPECT_TRUE(Translate({{"input", "x"},
                         {"background", false},
                         {"truncation", "disabled"},
                         {"store", false},
                         {"reasoning", {{"effort", "low"}}},
                         {"service_tier", "auto"},
                         {"text", {{"format", {{"type", "text"}}}, {"verbosity", "low"}}}})
                  .ok);
}

TEST(ResponsesApi, PreviousResponseContinuesItsConversation) {
  ResponsesStore store(4);
  Translated first = Translate({{"input", "Hi"}, {"instructions", "Old rules."}});
  ASSERT_TRUE(first.ok);
  ResponsesOutput out;
  out.text = "Hello!";
  out.calls.push_back({"call_9", "f", "{}"});
  auto stored = std::make_shared<StoredResponse>();
  stored->history = ResponsesHistoryAfter(first.turn, out);
  store.Put("resp_1", stored);

  Translated next =
      Translate({{"input", "More"}, {"previous_response_id", "resp_1"}, {"instructions", "New."}}, &store);
  ASSERT_TRUE(next.ok) << next.err.ToJson();
  const ojson want = ojson::parse(R"([
    {"role": "system", "content": "New."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "tool_calls": [
      {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "user", "content": "More"}
  ])");
  EXPECT_EQ(next.chat["messages"], want);  // the old instructions are not inherited
  EXPECT_EQ(next.turn.echo["previous_response_id"], "resp_1");

  Translated missing = Translate({{"input", "x"}, {"previous_response_id", "resp_2"}}, &store);
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.err.status, 404);
  EXPECT_EQ(missing.err.param, "previous_response_id");
}

TEST(ResponsesApi, CountTokensDropsGenerationFields) {
  Translated t = Translate({{"input", "x"}, {"max_output_tokens", 5}, {"stream", true}}, nullptr, true);
  ASSERT_TRUE(t.ok);
  EXPECT_FALSE(t.chat.contains("max_tokens"));
  EXPECT_FALSE(t.chat.contains("stream"));
}

TEST(ResponsesApi, ResponseObjectAndItems) {
  Translated t = Translate({{"input", "x"}, {"max_output_tokens", 3}});
  ASSERT_TRUE(t.ok);
  ResponsesOutput out;
  out.text = "abc";
  out.logprobs = ojson::array();
  out.calls.push_back({"call_1", "f", "{\"a\":1}"});
  const ojson items = ResponsesOutputItems("xyz", out, "incomplete", false);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0]["id"], "msg_xyz");
  EXPECT_EQ(items[0]["type"], "message");
  EXPECT_EQ(items[0]["status"], "incomplete");
  EXPECT_EQ(items[0]["content"][0], ojson::parse(R"({"type": "output_text", "text": "abc", "annotations": []})"));
  EXPECT_EQ(items[1], ojson::parse(R"({"id": "fc_xyz_0", "type": "function_call", "status": "incomplete",
                                        "call_id": "call_1", "name": "f", "arguments": "{\"a\":1}"})"));
  ResponsesUsage usage{5, 2, 3};
  const ojson r = ResponseObject(t.turn, "resp_xyz", 100, "model", "incomplete", items, &usage);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_TRUE(r["error"].is_null());
  EXPECT_EQ(r["max_output_tokens"], 3);
  EXPECT_EQ(r["usage"], ojson::parse(R"({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 2},
                                          "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0},
                                          "total_tokens": 8})"));
  const ojson failed = ResponseObject(t.turn, "resp_xyz", 100, "model", "failed", ojson::array(), &usage, "boom");
  EXPECT_EQ(failed["error"]["message"], "boom");
  // No text: the calls alone.
  out.text.clear();
  EXPECT_EQ(ResponsesOutputItems("xyz", out, "completed", false).size(), 1u);
  EXPECT_EQ(ResponsesParam("max_tokens"), "max_output_tokens");
  EXPECT_EQ(ResponsesParam("messages"), "input");
}

TEST(ResponsesStore, DropsTheLeastRecentlyUsed) {
  ResponsesStore store(2);
  store.Put("a", std::make_shared<StoredResponse>());
  store.Put("b", std::make_shared<StoredResponse>());
  ASSERT_NE(store.Get("a"), nullptr);  // a is now the most recent
  store.Put("c", std::make_shared<StoredResponse>());
  EXPECT_EQ(store.Get("b"), nullptr);
  EXPECT_NE(store.Get("a"), nullptr);
  EXPECT_NE(store.Get("c"), nullptr);
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.Erase("a"));
  EXPECT_FALSE(store.Erase("a"));
  ResponsesStore none(0);
  none.Put("a", std::make_shared<StoredResponse>());
  EXPECT_EQ(none.Get("a"), nullptr);
}

}  // namespace
}  // namespace infera::server::responses_test
