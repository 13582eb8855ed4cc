// The token-level grammar constraint on the bundled model's real vocabulary:
// the mask allows exactly the tokens whose bytes keep the text a prefix of
// the grammar (checked against a brute-force scan of every token), states
// are cached, and sampling only allowed tokens always ends in a sentence.
#include "sampling/grammar_constraint.h"

#include <limits>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "server/output_constraints.h"
#include "unit/test_util.h"

namespace infera::grammar_constraint_test {
namespace {

class GrammarConstraintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = testing::DefaultTokenizer();
    ASSERT_NE(tok_, nullptr);
    std::vector<std::string> pieces(tok_->n_vocab());
    for (int32_t id = 0; id < tok_->n_vocab(); ++id) pieces[id] = tok_->TokenToPiece(id);
    vocab_ = std::make_shared<const VocabTrie>(pieces);
    eog_ = {tok_->vocab().eos};
    for (int32_t id = 0; id < tok_->n_vocab(); ++id) {
      if (pieces[id].find_first_of("}]\"") != std::string::npos) closers_.push_back(id);
    }
  }
  std::shared_ptr<const Grammar> Parse(const std::string& gbnf) {
    auto g = Grammar::Parse(gbnf);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return *g;
  }
  // Samples `steps` random allowed tokens; returns the text.
  std::string RandomWalk(const std::shared_ptr<const Grammar>& g, uint64_t seed, bool* ended, int steps = 400) {
    GrammarConstraint c(g, vocab_, eog_, false);
    std::mt19937_64 rng(seed);
    std::string text;
    *ended = false;
    const int32_t V = tok_->n_vocab();
    std::vector<float> logits(V);
    for (int s = 0; s < steps; ++s) {
      for (float& l : logits) l = std::uniform_real_distribution<float>(0, 1)(rng);
      // Nudge toward closing brackets and the end-of-text so walks finish.
      logits[eog_[0]] += 0.5f;
      for (int32_t t : closers_) logits[t] += 0.4f;
      if (c.Mask(logits.data(), V) == 0) break;
      int32_t best = 0;
      for (int32_t t = 1; t < V; ++t) best = logits[t] > logits[best] ? t : best;
      if (best == eog_[0]) {
        *ended = true;
        break;
      }
      EXPECT_TRUE(c.Advance(best));
      text += tok_->TokenToPiece(best);
      if (c.MustEnd()) {
        *ended = true;
        break;
      }
    }
    return text;
  }

  std::unique_ptr<Tokenizer> tok_;
  std::shared_ptr<const VocabTrie> vocab_;
  std::vector<int32_t> eog_;
  std::vector<int32_t> closers_;  // tokens with } ] or "
};

TEST_F(GrammarConstraintTest, MaskEqualsBruteForce) {
  auto g = Parse(server::kJsonObjectGbnf);
  GrammarConstraint c(g, vocab_, eog_, false);
  GrammarMatcher m(g);
  const int32_t V = tok_->n_vocab();
  for (const char* prefix : {"", "{", "{\"a", "{\"a\": [1", "{\"a\": \"\xC3"}) {
    GrammarConstraint ci(g, vocab_, eog_, false);
    GrammarMatcher mi(g);
    // Feed the prefix through token pieces equal to single bytes where possible.
    ASSERT_TRUE(mi.AcceptBytes(prefix)) << prefix;
    std::vector<float> logits(V, 0.0f);
    // A constraint in the same state: advance it through byte tokens.
    for (const char* p = prefix; *p; ++p) {
      int32_t byte_tok = -1;
      for (int32_t t = 0; t < V && byte_tok < 0; ++t) {
        if (tok_->TokenToPiece(t) == std::string(1, *p)) byte_tok = t;
      }
      ASSERT_GE(byte_tok, 0);
      ASSERT_TRUE(ci.Advance(byte_tok)) << prefix;
    }
    const int32_t n = ci.Mask(logits.data(), V);
    int32_t want = 0;
    for (int32_t t = 0; t < V; ++t) {
      const std::string piece = tok_->TokenToPiece(t);
      const bool ok = t == eog_[0] ? mi.CanEnd() : !piece.empty() && mi.CanAccept(piece);
      want += ok;
      EXPECT_EQ(logits[t] != -std::numeric_limits<float>::infinity(), ok) << "prefix '" << prefix << "' token "
                                                                           << t << " '" << piece << "'";
    }
    EXPECT_EQ(n, want);
    EXPECT_GT(n, 0);
  }
}

TEST_F(GrammarConstraintTest, RandomWalksEndInSentences) {
  auto g = Parse(server::kJsonObjectGbnf);
  int ended = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    bool done = false;
    const std::string text = RandomWalk(g, seed, &done);
    GrammarMatcher m(g);
    ASSERT_TRUE(m.AcceptBytes(text)) << text;
    if (done) {
      EXPECT_TRUE(m.CanEnd()) << text;
      EXPECT_TRUE(ParseJson(text).is_object()) << text;  // (a discarded value is not an object)
      ++ended;
    }
  }
  EXPECT_GT(ended, 10);
  auto choice = Parse(R"(root ::= "In the beginning" | "Amen" | "Selah")");
  for (uint64_t seed = 0; seed < 10; ++seed) {
    bool done = false;
    const std::string text = RandomWalk(choice, seed, &done);
    EXPECT_TRUE(done) << "'" << text << "'";
    EXPECT_TRUE(text == "In the beginning" || text == "Amen" || text == "Selah") << text;
  }
}

}  // namespace
}  // namespace infera::grammar_constraint_test
