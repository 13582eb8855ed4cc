// Parsing and validation of OpenAI request bodies, with the bundled model's
// tokenizer: defaults, every prompt form, and the error (status, param) of
// each kind of bad input.
#include <gtest/gtest.h>

#include "base/file_util.h"
#include "server/openai_request.h"
#include "unit/test_util.h"

namespace infera::server::openai_request_test {
namespace {

class OpenAIRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = testing::DefaultTokenizer();
    ASSERT_NE(tok_, nullptr);
    ctx_.tokenizer = tok_.get();
    ctx_.limits.max_model_len = 64;
    ctx_.limits.n_vocab = 1000;
    ctx_.limits.max_n = 4;
  }

  // The error of parsing `body`; status 0 if it parsed.
  ApiError Error(const std::string& body, bool chat = false) {
    CompletionSpec spec;
    ApiError err;
    if (ParseCompletionRequest(body, chat, ctx_, &spec, &err)) err.status = 0;
    return err;
  }
  CompletionSpec Parse(const std::string& body, bool chat = false) {
    CompletionSpec spec;
    ApiError err;
    EXPECT_TRUE(ParseCompletionRequest(body, chat, ctx_, &spec, &err)) << err.message;
    return spec;
  }

  std::unique_ptr<Tokenizer> tok_;
  ParseContext ctx_;
};

TEST_F(OpenAIRequestTest, DefaultsAreOpenAIs) {
  CompletionSpec s = Parse(R"({"prompt": "In the beginning"})");
  EXPECT_EQ(s.prompts.size(), 1u);
  EXPECT_FALSE(s.prompts[0].empty());
  EXPECT_EQ(s.prompt_texts[0], "In the beginning");
  EXPECT_EQ(s.params.sampling.temperature, 1.0f);
  EXPECT_EQ(s.params.sampling.top_p, 1.0f);
  EXPECT_EQ(s.params.sampling.top_k, 0);
  EXPECT_EQ(s.params.sampling.min_p, 0.0f);
  EXPECT_FALSE(s.params.sampling.has_seed);
  EXPECT_EQ(s.params.max_tokens, -1);
  EXPECT_EQ(s.params.logprobs, -1);
  EXPECT_EQ(s.n, 1);
  EXPECT_FALSE(s.stream);
}

TEST_F(OpenAIRequestTest, FieldsAndExtensions) {
  CompletionSpec s = Parse(R"({"prompt": "x", "max_tokens": 7, "temperature": 0, "top_p": 0.5, "n": 3, "seed": -1,
    "stop": ["a", "", "b"], "presence_penalty": 1.5, "frequency_penalty": -0.5, "logprobs": 2, "top_k": 5,
    "min_p": 0.1, "repetition_penalty": 1.1, "ignore_eos": true, "min_tokens": 2, "priority": -3,
    "logit_bias": {"17": -100, "3": 2.5}, "stream": true, "stream_options": {"include_usage": true},
    "user": "u"})");
  EXPECT_EQ(s.params.max_tokens, 7);
  EXPECT_EQ(s.params.sampling.temperature, 0.0f);
  EXPECT_EQ(s.params.sampling.top_p, 0.5f);
  EXPECT_EQ(s.n, 3);
  EXPECT_TRUE(s.params.sampling.has_seed);
  EXPECT_EQ(s.params.sampling.seed, ~0ull);
  EXPECT_EQ(s.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.params.sampling.presence_penalty, 1.5f);
  EXPECT_TRUE(s.logprobs);
  EXPECT_EQ(s.params.logprobs, 2);
  EXPECT_EQ(s.params.sampling.top_k, 5);
  EXPECT_TRUE(s.params.ignore_eos);
  EXPECT_EQ(s.params.min_tokens, 2);
  EXPECT_EQ(s.params.priority, -3);
  ASSERT_EQ(s.params.logit_bias.size(), 2u);
  EXPECT_TRUE(s.stream);
  EXPECT_TRUE(s.include_usage);
  EXPECT_EQ(s.user, "u");
}

TEST_F(OpenAIRequestTest, LoraScales) {
  // llama-server's per-request scales; adapters not named are off.
  ctx_.limits.n_lora = 3;
  CompletionSpec s = Parse(R"({"prompt": "x", "lora": [{"id": 2, "scale": 0.5}, {"id": 0}]})");
  EXPECT_TRUE(s.lora_given);
  EXPECT_EQ(s.params.lora_scales, (std::vector<float>{1.0f, 0.0f, 0.5f}));
  EXPECT_EQ(Parse(R"({"prompt": "x", "lora": []})").params.lora_scales, (std::vector<float>{0, 0, 0}));
  EXPECT_FALSE(Parse(R"({"prompt": "x"})").lora_given);
  for (const char* bad :
       {R"({"prompt": "x", "lora": [{"id": 3}]})", R"({"prompt": "x", "lora": [{"scale": 1}]})",
        R"({"prompt": "x", "lora": {"id": 0}})", R"({"prompt": "x", "lora": [{"id": 0, "scale": "a"}]})"}) {
    EXPECT_EQ(Error(bad).param, "lora") << bad;
  }
  ctx_.limits.n_lora = 0;
  EXPECT_EQ(Error(R"({"prompt": "x", "lora": [{"id": 0}]})").param, "lora");
  EXPECT_EQ(Error(R"({"prompt": "x", "lora": []})").status, 0);
}

TEST_F(OpenAIRequestTest, PromptForms) {
  EXPECT_EQ(Parse(R"({"prompt": [5, 6, 7]})").prompts, (std::vector<std::vector<int32_t>>{{5, 6, 7}}));
  EXPECT_EQ(Parse(R"({"prompt": [[5], [6, 7]]})").prompts, (std::vector<std::vector<int32_t>>{{5}, {6, 7}}));
  CompletionSpec s = Parse(R"({"prompt": ["a", "b c"]})");
  EXPECT_EQ(s.prompts.size(), 2u);
  EXPECT_EQ(s.prompt_texts[1], "b c");
}

TEST_F(OpenAIRequestTest, ChatMessages) {
  CompletionSpec s = Parse(R"({"messages": [{"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]},
    {"role": "assistant", "content": null}, {"role": "user", "content": "Again"}],
    "max_completion_tokens": 5, "max_tokens": 9, "logprobs": true, "top_logprobs": 2})", true);
  ASSERT_EQ(s.prompts.size(), 1u);
  EXPECT_NE(s.prompt_texts[0].find("Hi there"), std::string::npos);
  EXPECT_EQ(s.params.max_tokens, 5);  // max_completion_tokens wins
  EXPECT_EQ(s.params.logprobs, 2);
  EXPECT_EQ(Parse(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 9})", true).params.max_tokens, 9);
}

// vLLM's chat_template_kwargs: enable_thinking reaches the template (Qwen3's
// empty think block); anything else is refused, never ignored.
TEST_F(OpenAIRequestTest, ChatTemplateKwargs) {
  ctx_.chat_template = ChatTemplate(ChatFormat::kQwen3);
  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
  CompletionSpec think = Parse("{" + msgs + "}", true);
  CompletionSpec no_think = Parse("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": false}})", true);
  EXPECT_EQ(think.prompt_texts[0].find("<think>"), std::string::npos);
  EXPECT_NE(no_think.prompt_texts[0].find("<think>\n\n</think>"), std::string::npos) << no_think.prompt_texts[0];
  EXPECT_EQ(Error("{" + msgs + R"(, "chat_template_kwargs": {"add_vision_id": true}})", true).param,
            "chat_template_kwargs");
  EXPECT_EQ(Error("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": "no"}})", true).status, 400);
  EXPECT_EQ(Error("{" + msgs + R"(, "chat_template_kwargs": [1]})", true).status, 400);
  EXPECT_EQ(Error("{" + msgs + R"(, "chat_template_kwargs": {}})", true).status, 0);
}

// A Jinja template (Qwen3's own) gets every chat_template_kwargs member as
// a variable; its raise_exception is a 400 naming 'messages'.
TEST_F(OpenAIRequestTest, JinjaTemplateKwargsAndErrors) {
  auto qwen3 = ReadFileToString(std::string(INFERA_TEST_DATA_DIR) + "/chat_templates/qwen3.jinja");
  ASSERT_TRUE(qwen3.ok());
  ctx_.chat_template = ChatTemplate::FromJinja(*qwen3).value();
  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
  EXPECT_EQ(Parse("{" + msgs + "}", true).prompt_texts[0].find("<think>"), std::string::npos);
  CompletionSpec no_think = Parse("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": false}})", true);
  EXPECT_NE(no_think.prompt_texts[0].find("</think>"), std::string::npos) << no_think.prompt_texts[0];
  EXPECT_EQ(Error("{" + msgs + R"(, "chat_template_kwargs": {"anything": [1, 2]}})", true).status, 0);

  ctx_.chat_template = ChatTemplate::FromJinja("{{ raise_exception('roles must alternate') }}").value();
  ApiError e = Error("{" + msgs + "}", true);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("roles must alternate"), std::string::npos) << e.message;
}

// vLLM's per-request chat_template: refused unless the server trusts it.
TEST_F(OpenAIRequestTest, PerRequestChatTemplate) {
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template": "{% for m in messages %}<<{{ m.content | upper }}>>{% endfor %}"})";
  ApiError e = Error(body, true);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "chat_template");
  ctx_.trust_request_chat_template = true;
  EXPECT_NE(Parse(body, true).prompt_texts[0].find("<<HI>>"), std::string::npos);
  EXPECT_EQ(Error(R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template": "{% if %}"})", true).param,
            "chat_template");
}

TEST_F(OpenAIRequestTest, BadInputNamesTheParam) {
  struct Case {
    const char* body;
    bool chat;
    const char* param;
  };
  const Case cases[] = {
      {R"({"max_tokens": 3})", false, "prompt"},
      {R"({"prompt": null})", false, "prompt"},
      {R"({"prompt": {}})", false, "prompt"},
      {R"({"prompt": []})", false, "prompt"},
      {R"({"prompt": [1, "a"]})", false, "prompt"},
      {R"({"prompt": [1, 5000]})", false, "prompt"},
      {R"({"prompt": [-1]})", false, "prompt"},
      {R"({"prompt": "x", "max_tokens": 0})", false, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 2.5})", false, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 99999999999})", false, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 63})", false, "prompt"},  // 63 + prompt > 64
      {R"({"prompt": "x", "temperature": -0.1})", false, "temperature"},
      {R"({"prompt": "x", "temperature": true})", false, "temperature"},
      {R"({"prompt": "x", "top_p": 1.5})", false, "top_p"},
      {R"({"prompt": "x", "min_p": -1})", false, "min_p"},
      {R"({"prompt": "x", "repetition_penalty": 0})", false, "repetition_penalty"},
      {R"({"prompt": "x", "n": 0})", false, "n"},
      {R"({"prompt": "x", "n": 5})", false, "n"},
      {R"({"prompt": "x", "seed": "1"})", false, "seed"},
      {R"({"prompt": "x", "stop": [1]})", false, "stop"},
      {R"({"prompt": "x", "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})",
       false, "stop"},
      {R"({"prompt": "x", "logprobs": 21})", false, "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", false, "logprobs"},
      {R"({"prompt": "x", "echo": 1})", false, "echo"},
      {R"({"prompt": "x", "max_tokens": 0})", false, "max_tokens"},  // 0 only with echo
      {R"({"prompt": "x", "logit_bias": []})", false, "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"1000": 1}})", false, "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"1": "a"}})", false, "logit_bias"},
      {R"({"prompt": "x", "stream": "yes"})", false, "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", false, "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": 3})", false, "stream_options"},
      {R"({"prompt": "x", "response_format": {"type": "yaml"}})", false, "response_format"},
      {R"({"prompt": "x", "tools": [{"type": "function"}]})", false, "tools"},
      {R"({"prompt": "x", "model": 3})", false, "model"},
      {R"({"messages": "hi"})", true, "messages"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", true, "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true, "messages"},
      {R"({"messages": [{"role": "user", "content": 5}]})", true, "messages"},
      {R"({"messages": [{"content": "x"}]})", true, "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 1})", true, "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", true, "logprobs"},
  };
  for (const Case& c : cases) {
    ApiError e = Error(c.body, c.chat);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
    EXPECT_EQ(e.type, "invalid_request_error");
  }
  for (const char* body : {"", "{", "[]", "\"x\"", "{\"prompt\": \"x\",}", "\xff\xfe"}) {
    ApiError e = Error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.code, "invalid_json") << body;
  }
  ApiError e = Error(R"({"prompt": "x", "max_tokens": 63})");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.ToJson().find(R"("param":"prompt")"), std::string::npos);
}

// Fields that would change the output but are not implemented: refused with
// 400 naming the field, unless they hold their no-op value.
TEST_F(OpenAIRequestTest, UnimplementedOutputFieldsAreRefusedNotIgnored) {
  const char* kRefused[][2] = {{"grammar", R"("root ::= foo")"},
                               {"json_schema", R"({"type": "string", "pattern": "a"})"},
                               {"guided_json", R"({"not": {}})"},
                               {"guided_regex", R"("(a)\\1")"},
                               {"guided_choice", R"([3])"},
                               {"guided_grammar", R"("x")"},
                               {"suffix", R"("end")"},
                               {"best_of", "2"},
                               {"use_beam_search", "true"},
                               {"mirostat", "2"},
                               {"typical_p", "0.9"},
                               {"tfs_z", "0.5"},
                               {"response_format", R"({"type": "json_schema"})"},
                               {"response_format", R"({"type": "yaml"})"},
                               {"tool_choice", R"("required")"}};
  for (const auto& [field, value] : kRefused) {
    const std::string body = std::string(R"({"prompt": "x", ")") + field + "\": " + value + "}";
    ApiError e = Error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, field) << body;
  }
  // Chat-only ones.
  for (const char* body : {R"({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]})",
                           R"({"messages": [{"role": "user", "content": "x"}], "chat_template": "{{x}}"})",
                           R"({"messages": [{"role": "user", "content": "x"}], "modalities": ["audio"]})"}) {
    EXPECT_EQ(Error(body, true).status, 400) << body;
  }
  // No-op values pass.
  for (const char* body :
       {R"({"prompt": "x", "grammar": "", "json_schema": null, "suffix": "", "best_of": 1, "use_beam_search": false,
            "skip_special_tokens": true, "typical_p": 1, "mirostat": 0, "stop_token_ids": []})",
        R"({"prompt": "x", "n": 3, "best_of": 3})"}) {
    EXPECT_EQ(Error(body).status, 0) << body;
  }
}

TEST_F(OpenAIRequestTest, LlamaCppNamesAreAliases) {
  EXPECT_EQ(Parse(R"({"prompt": "x", "n_predict": 7})").params.max_tokens, 7);
  EXPECT_EQ(Parse(R"({"prompt": "x", "n_predict": -1})").params.max_tokens, -1);
  EXPECT_EQ(Parse(R"({"prompt": "x", "max_tokens": 3, "n_predict": 7})").params.max_tokens, 3);
  EXPECT_EQ(Error(R"({"prompt": "x", "n_predict": 0})").param, "n_predict");
  CompletionSpec s = Parse(R"({"prompt": "x", "repeat_penalty": 1.3})");
  EXPECT_FLOAT_EQ(s.params.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(s.params.sampling.penalty_last_n, 64);  // llama.cpp's default window with its name
  EXPECT_EQ(Parse(R"({"prompt": "x", "repeat_penalty": 1.3, "repeat_last_n": 8})").params.sampling.penalty_last_n, 8);
}

// llama.cpp's n_probs / post_sampling_probs / return_tokens: on
// /completion (ParseContext::native) its probabilities, up to 1000; on the
// OpenAI endpoints n_probs is logprobs' k (up to 20), return_tokens only false.
TEST_F(OpenAIRequestTest, LlamaCppProbabilities) {
  CompletionSpec s = Parse(R"({"prompt": "x", "n_probs": 3})");
  EXPECT_TRUE(s.logprobs);
  EXPECT_EQ(s.params.logprobs, 3);
  EXPECT_FALSE(s.params.logprobs_processed);
  EXPECT_EQ(Parse(R"({"prompt": "x", "n_probs": 3, "logprobs": 1})").params.logprobs, 1);  // its own wins
  EXPECT_EQ(Parse(R"({"prompt": "x", "n_probs": 0})").params.logprobs, -1);
  s = Parse(R"({"messages": [{"role": "user", "content": "x"}], "n_probs": 2, "post_sampling_probs": true})", true);
  EXPECT_EQ(s.params.logprobs, 2);
  EXPECT_TRUE(s.params.logprobs_processed);
  EXPECT_EQ(Error(R"({"prompt": "x", "n_probs": 21})").param, "n_probs");
  EXPECT_EQ(Error(R"({"prompt": "x", "return_tokens": true})").param, "return_tokens");
  EXPECT_EQ(Error(R"({"messages": [{"role": "user", "content": "x"}], "return_tokens": true})", true).param,
            "return_tokens");
  EXPECT_FALSE(Parse(R"({"prompt": "x", "return_tokens": false})").return_tokens);
  ctx_.native = true;
  s = Parse(R"({"prompt": "x", "n_probs": 1000, "return_tokens": true})");
  EXPECT_TRUE(s.native);
  EXPECT_TRUE(s.return_tokens);
  EXPECT_EQ(s.params.logprobs, 1000);
  EXPECT_EQ(Error(R"({"prompt": "x", "n_probs": 1001})").param, "n_probs");
  EXPECT_EQ(Error(R"({"prompt": "x", "logprobs": 2})").param, "logprobs");  // /completion takes n_probs
  EXPECT_EQ(Error(R"({"prompt": "x", "prompt_logprobs": 2})").param, "prompt_logprobs");  // vLLM's, on /v1
  ctx_.native = false;
  // vLLM's prompt_logprobs: the engine computes the larger of it and echo's k.
  s = Parse(R"({"prompt": "x", "prompt_logprobs": 0})");
  EXPECT_EQ((std::pair{s.prompt_logprobs, s.params.prompt_logprobs}), (std::pair{0, 0}));
  s = Parse(R"({"prompt": "x", "prompt_logprobs": 5, "echo": true, "logprobs": 2})");
  EXPECT_EQ((std::pair{s.prompt_logprobs, s.params.prompt_logprobs}), (std::pair{5, 5}));
  EXPECT_EQ(Parse(R"({"prompt": "x", "prompt_logprobs": 1, "echo": true, "logprobs": 4})").params.prompt_logprobs, 4);
  EXPECT_EQ(Parse(R"({"prompt": "x"})").params.prompt_logprobs, -1);
  EXPECT_EQ(Error(R"({"prompt": "x", "prompt_logprobs": 2, "stream": true})").param, "prompt_logprobs");
  EXPECT_EQ(Error(R"({"prompt": "x", "prompt_logprobs": 21})").param, "prompt_logprobs");
}

}  // namespace
}  // namespace infera::server::openai_request_test
