// The request field table: every OpenAI / vLLM / llama.cpp field is parsed,
// accepted as having no effect, or refused unless it holds its no-op value;
// unknown fields are refused; docs/api.md lists exactly this table.
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/json.h"
#include "server/openai_request.h"
#include "server/request_fields.h"
#include "unit/test_util.h"

namespace infera::server::request_fields_test {
namespace {

using nlohmann::json;

class RequestFieldsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = testing::DefaultTokenizer();
    ASSERT_NE(tok_, nullptr);
    ctx_.tokenizer = tok_.get();
    ctx_.limits.max_model_len = 64;
    ctx_.limits.n_vocab = 1000;
    ctx_.limits.max_n = 4;
  }

  // A minimal valid body for the endpoint plus field = value.
  static json Body(bool chat, const std::string& field, const json& value) {
    json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "x"}}}}} : json{{"prompt", "x"}};
    body[field] = value;
    return body;
  }
  // The error of parsing `body`; status 0 if it parsed.
  ApiError Error(const json& body, bool chat) {
    CompletionSpec spec;
    ApiError err;
    if (ParseCompletionRequest(DumpJson(body), chat, ctx_, &spec, &err)) err.status = 0;
    return err;
  }

  std::unique_ptr<Tokenizer> tok_;
  ParseContext ctx_;
};

// A value that asks for nothing / for something, for a refused field.
json NoopValue(const RequestField& f) {
  switch (f.noop) {
    case Noop::kNull: return nullptr;
    case Noop::kEmpty: return json::array();
    case Noop::kFalse: return false;
    case Noop::kTrue: return true;
    case Noop::kZero: return 0;
    case Noop::kOne: return 1;
    case Noop::kNotPositive: return -1;
    case Noop::kText: {
      const std::string options = f.noop_text;
      return options.substr(0, options.find('|'));
    }
  }
  return nullptr;
}
json ActiveValue(const RequestField& f) {
  switch (f.noop) {
    case Noop::kFalse: return true;
    case Noop::kTrue: return false;
    case Noop::kZero:
    case Noop::kOne:
    case Noop::kNotPositive: return 0.5;
    default: return "something";
  }
}
json ValueOfKind(JsonKind kind) {
  switch (kind) {
    case JsonKind::kString: return "s";
    case JsonKind::kBool: return true;
    case JsonKind::kNumber: return 0.5;
    case JsonKind::kInteger: return 3;
    case JsonKind::kObject: return json{{"k", "v"}};
    case JsonKind::kArray: return json::array({"\n"});
  }
  return nullptr;
}

TEST_F(RequestFieldsTest, RefusedFieldsAreRefusedUnlessNoop) {
  int checked = 0;
  for (const RequestField& f : RequestFields()) {
    if (f.use != FieldUse::kRefused) continue;
    for (bool chat : {false, true}) {
      if ((f.endpoints & (chat ? kChat : kCompletions)) == 0) continue;
      ApiError e = Error(Body(chat, f.name, ActiveValue(f)), chat);
      EXPECT_EQ(e.status, 400) << f.name;
      EXPECT_EQ(e.param, f.name) << f.name;
      EXPECT_NE(e.message.find("not supported"), std::string::npos) << e.message;
      EXPECT_EQ(Error(Body(chat, f.name, NoopValue(f)), chat).status, 0) << f.name << " " << NoopValue(f);
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

TEST_F(RequestFieldsTest, NoEffectFieldsAreTypeChecked) {
  for (const RequestField& f : RequestFields()) {
    if (f.use != FieldUse::kNoEffect) continue;
    const bool chat = (f.endpoints & kCompletions) == 0;
    EXPECT_EQ(Error(Body(chat, f.name, ValueOfKind(f.kind)), chat).status, 0) << f.name;
    const json wrong = f.kind == JsonKind::kBool ? json("yes") : json(false);
    ApiError e = Error(Body(chat, f.name, wrong), chat);
    EXPECT_EQ(e.status, 400) << f.name;
    EXPECT_EQ(e.param, f.name);
  }
}

TEST_F(RequestFieldsTest, UnknownAndWrongEndpointFieldsAreRefused) {
  ApiError e = Error(Body(false, "max_token", 5), false);  // a typo must not be dropped
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "max_token");
  EXPECT_NE(e.message.find("Unrecognized request argument supplied: max_token"), std::string::npos);
  e = Error(Body(true, "prompt", "x"), true);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("/v1/completions"), std::string::npos) << e.message;
  e = Error(Body(false, "messages", json::array()), false);
  EXPECT_EQ(e.param, "messages");
  json body = Body(false, "stream_options", json{{"include_usage", true}, {"extra", 1}});
  body["stream"] = true;
  EXPECT_EQ(Error(body, false).param, "stream_options");
  body["stream_options"] = json{{"include_obfuscation", false}};
  EXPECT_EQ(Error(body, false).status, 0);
}

TEST_F(RequestFieldsTest, MessageFields) {
  auto chat = [&](const json& message) {
    return Error(json{{"messages", json::array({message})}}, true);
  };
  EXPECT_EQ(chat({{"role", "user"}, {"content", "x"}, {"name", "ann"}}).status, 0);
  EXPECT_EQ(chat({{"role", "assistant"}, {"content", "x"}, {"tool_calls", json::array()}, {"refusal", nullptr}}).status,
            0);
  for (const json& m : {json{{"role", "user"}, {"content", "x"}, {"tool_call_id", "c1"}},
                        json{{"role", "assistant"}, {"content", "x"}, {"tool_calls", {{{"id", "c1"}}}}},
                        json{{"role", "user"}, {"content", "x"}, {"name", 3}},
                        json{{"role", "user"}, {"content", "x"}, {"whatever", 1}}}) {
    ApiError e = chat(m);
    EXPECT_EQ(e.status, 400) << m;
    EXPECT_EQ(e.param, "messages");
  }
}

TEST_F(RequestFieldsTest, AddSpecialTokensAndGenerationPrompt) {
  CompletionSpec with, without;
  ApiError err;
  ASSERT_TRUE(ParseCompletionRequest(R"({"prompt": "In the beginning"})", false, ctx_, &with, &err));
  ASSERT_TRUE(ParseCompletionRequest(R"({"prompt": "In the beginning", "add_special_tokens": false})", false, ctx_,
                                     &without, &err));
  // The bundled model's vocabulary adds BOS; without special tokens it is gone.
  ASSERT_EQ(with.prompts[0].size(), without.prompts[0].size() + 1);
  EXPECT_EQ(std::vector<int32_t>(with.prompts[0].begin() + 1, with.prompts[0].end()), without.prompts[0]);

  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
  CompletionSpec open, closed;
  ASSERT_TRUE(ParseCompletionRequest("{" + msgs + "}", true, ctx_, &open, &err));
  ASSERT_TRUE(ParseCompletionRequest("{" + msgs + R"(, "add_generation_prompt": false})", true, ctx_, &closed, &err));
  EXPECT_NE(open.prompt_texts[0], closed.prompt_texts[0]);
  EXPECT_EQ(open.prompt_texts[0].rfind(closed.prompt_texts[0], 0), 0u) << "the generation prompt is a suffix";
}

// The docs/api.md row of field `f`.
std::string DocRow(const RequestField& f) {
  const char* endpoints = f.endpoints == kBothEndpoints ? "both" : f.endpoints == kChat ? "chat" : "completions";
  std::string use;
  switch (f.use) {
    case FieldUse::kParsed: use = "supported"; break;
    case FieldUse::kNoEffect: use = "accepted, no effect"; break;
    case FieldUse::kRefused: use = "400 unless " + NoopDescription(f); break;
  }
  return fmt::format("| `{}` | {} | {} | {} | {} |", f.name, f.origin, endpoints, use, f.what);
}

TEST(RequestFieldsDocs, ApiMdListsExactlyTheTable) {
  std::ifstream in(std::string(INFERA_DOCS_DIR) + "/api.md");
  ASSERT_TRUE(in.good());
  std::set<std::string> rows;
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("### Every request field", 0) == 0) in_table = true;
    else if (in_table && line.rfind("#", 0) == 0) break;
    else if (in_table && line.rfind("| `", 0) == 0) rows.insert(line);
  }
  std::string missing;
  std::set<std::string> expected;
  for (const RequestField& f : RequestFields()) {
    expected.insert(DocRow(f));
    if (rows.count(DocRow(f)) == 0) missing += DocRow(f) + "\n";
  }
  EXPECT_TRUE(missing.empty()) << "docs/api.md lacks these rows:\n" << missing;
  for (const std::string& row : rows) EXPECT_TRUE(expected.count(row) != 0) << "docs/api.md row not in the table: " << row;
}

}  // namespace
}  // namespace infera::server::request_fields_test
