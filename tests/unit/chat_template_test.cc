#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/json.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/loader.h"
#include "unit/test_util.h"

namespace infera::chat_template_test {
namespace {

const std::vector<ChatMessage> kConv = {
    {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "2+2?"}};

// Expected strings written from each family's documented prompt format.
TEST(ChatTemplate, RendersEachFamily) {
  EXPECT_EQ(RenderChat(ChatFormat::kChatml, kConv, true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(RenderChat(ChatFormat::kLlama3, kConv, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
            "Hello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(RenderChat(ChatFormat::kLlama2, kConv, true),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] 2+2? [/INST]");
  EXPECT_EQ(RenderChat(ChatFormat::kMistral, kConv, true),
            "<s>[INST] You are terse.\n\nHi [/INST] Hello.</s>[INST] 2+2? [/INST]");
  EXPECT_EQ(RenderChat(ChatFormat::kPhi3, kConv, true),
            "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n"
            "<|user|>\n2+2?<|end|>\n<|assistant|>\n");
  EXPECT_EQ(RenderChat(ChatFormat::kZephyr, kConv, true),
            "<|system|>\nYou are terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\n2+2?</s>\n"
            "<|assistant|>\n");
  EXPECT_EQ(RenderChat(ChatFormat::kGemma, kConv, true),
            "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(RenderChat(ChatFormat::kPlain, {{"user", "Hi"}}, true), "User: Hi\nAssistant:");
  EXPECT_EQ(RenderChat(ChatFormat::kTulu, kConv, true),
            "<|system|>\nYou are terse.\n<|user|>\nHi\n<|assistant|>\nHello.<|endoftext|>\n<|user|>\n2+2?\n"
            "<|assistant|>\n");
}

// Qwen3: earlier replies lose their reasoning, the last turn keeps it, and
// enable_thinking=false pre-fills an empty think block.
TEST(ChatTemplate, Qwen3ThinkingTags) {
  const std::vector<ChatMessage> conv = {{"user", "Hi"},
                                         {"assistant", "<think>\nGreet back.\n</think>\n\nHello."},
                                         {"user", "2+2?"}};
  EXPECT_EQ(RenderChat(ChatFormat::kQwen3, conv, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  ChatTemplateOptions no_think;
  no_think.enable_thinking = false;
  EXPECT_EQ(RenderChat(ChatFormat::kQwen3, {{"user", "2+2?"}}, true, no_think),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // A reply after the last user turn (continuing) keeps its reasoning.
  const std::vector<ChatMessage> cont = {{"user", "Hi"}, {"assistant", "<think>x</think>y"}};
  EXPECT_EQ(RenderChat(ChatFormat::kQwen3, cont, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>x</think>y<|im_end|>\n");
}

TEST(ChatTemplate, DetectsFamiliesFromTheirJinja) {
  struct Case { const char* jinja; ChatFormat want; };
  const Case cases[] = {
      {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
       ChatFormat::kChatml},
      {"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}",
       ChatFormat::kLlama3},
      {"{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}", ChatFormat::kMistral},
      {"{% set system_message = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}[INST]", ChatFormat::kLlama2},
      {"{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}", ChatFormat::kPhi3},
      {"{{ '<|user|>\\n' + message['content'] + eos_token }}", ChatFormat::kZephyr},
      // Qwen3 (ChatML with reasoning) and OLMo 2 / Tulu 3, abridged from their tokenizer_config.json.
      {"{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}{%- endif %}"
       "{{- '<|im_start|>' + message.role + '\\n' + content }}{{- '<think>\\n\\n</think>\\n\\n' }}",
       ChatFormat::kQwen3},
      {"{{ bos_token }}{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}"
       "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}",
       ChatFormat::kTulu},
      {"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}", ChatFormat::kGemma},
  };
  for (const auto& c : cases) {
    bool known = false;
    EXPECT_EQ(DetectChatFormat(c.jinja, &known), c.want) << c.jinja;
    EXPECT_TRUE(known);
  }
  bool known = true;
  EXPECT_EQ(DetectChatFormat("{{ something else }}", &known), ChatFormat::kPlain);
  EXPECT_FALSE(known);
}

TEST(ChatTemplate, MistralInstructVectors) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  const std::string dir = testing::SharedDir() + "/data/tokenizers/mistral";
  auto tok = TokenizerFromFile(dir + "/tokenizer.model.v1", -1);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto text = ReadFileToString(dir + "/mistral_v1_instruct_test_vectors.json");
  ASSERT_TRUE(text.ok());
  auto j = ParseJson(*text);
  ASSERT_FALSE(j.is_discarded());
  int n = 0;
  for (const auto& c : j["cases"]) {
    std::vector<ChatMessage> msgs;
    if (c["system"].is_string()) msgs.push_back({"system", c["system"].get<std::string>()});
    for (const auto& m : c["messages"]) msgs.push_back({m[0].get<std::string>(), m[1].get<std::string>()});
    EXPECT_EQ(EncodeChat(**tok, ChatTemplate(ChatFormat::kMistral), msgs, true).value(),
              c["ids"].get<std::vector<int32_t>>())
        << c["name"].get<std::string>();
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(ChatTemplate, ChatmlSpecialTokensBecomeTokens) {
  if (!testing::SharedAvailable()) GTEST_SKIP();
  // Qwen-style vocab: Llama-3's tiktoken file with <|im_start|> as a pure text
  // marker is not available; use the GPT-2 vocab's <|endoftext|> instead.
  auto tok = TokenizerFromFile(testing::SharedDir() + "/data/tokenizers/gpt2-hf/gpt2_vocab.json", -1);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto ids = (*tok)->Encode("a<|endoftext|>b", false, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{64, 50256, 65}));
  auto plain = (*tok)->Encode("a<|endoftext|>b", false, false);
  EXPECT_GT(plain.size(), 3u);  // not parsed as a special token
}

}  // namespace
}  // namespace infera::chat_template_test
