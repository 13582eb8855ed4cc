// infera's Jinja interpreter against Jinja2: every real chat template in
// tests/data/chat_templates rendered with every conversation there, and every
// snippet of snippets.json, must give exactly what Jinja2 (configured as
// transformers configures it) gave — or fail where Jinja2 failed, with the
// same message when the template itself raised. expected/ is written by
// render_expected.py; the py_jinja_expected_fresh test keeps it current.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "jinja/template.h"

namespace infera::jinja_reference_test {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

const fs::path kDir = fs::path(INFERA_TEST_DATA_DIR) / "chat_templates";

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Case {
  std::string name;
  std::string source;
  OJson context;
  fs::path expected;
};

std::vector<Case> LoadCases() {
  std::vector<Case> cases;
  const OJson convs = OJson::parse(ReadFile(kDir / "conversations.json"));
  const OJson snippets = OJson::parse(ReadFile(kDir / "snippets.json"));
  for (const auto& entry : fs::directory_iterator(kDir / "expected")) {
    const std::string file = entry.path().filename().string();
    const std::string stem = entry.path().stem().string();
    const size_t sep = stem.find("__");
    if (sep == std::string::npos) continue;
    const std::string left = stem.substr(0, sep), right = stem.substr(sep + 2);
    Case c{stem, "", OJson::object(), entry.path()};
    if (left == "snippet") {
      c.source = snippets["snippets"][right].get<std::string>();
      c.context = snippets["context"];
    } else {
      c.source = ReadFile(kDir / (left + ".jinja"));
      c.context = convs[right];
      if (!c.context.contains("tools")) c.context["tools"] = nullptr;  // as transformers passes them
      if (!c.context.contains("documents")) c.context["documents"] = nullptr;
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(JinjaReference, EveryTemplateAndSnippetRendersAsJinja2Does) {
  const std::vector<Case> cases = LoadCases();
  ASSERT_GE(cases.size(), 150u) << "expected/ is missing renderings";
  int failures = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string want = ReadFile(c.expected);
    const bool want_error = c.expected.extension() == ".error";
    StatusOr<std::string> got = [&]() -> StatusOr<std::string> {
      ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(c.source));
      return t.Render(c.context);
    }();
    if (!want_error) {
      if (!got.ok()) {
        ADD_FAILURE() << "infera failed: " << got.status().message() << "\nJinja2 rendered:\n" << want;
        ++failures;
      } else if (*got != want) {
        ADD_FAILURE() << "renderings differ\n--- Jinja2:\n" << want << "\n--- infera:\n" << *got;
        ++failures;
      }
      continue;
    }
    if (got.ok()) {
      ADD_FAILURE() << "Jinja2 failed (" << want << ") but infera rendered:\n" << *got;
      ++failures;
      continue;
    }
    if (want.rfind("raise_exception\n", 0) == 0) {  // the template's own message must come through
      const std::string msg = want.substr(std::string("raise_exception\n").size());
      EXPECT_NE(got.status().message().find(msg), std::string::npos)
          << "want the message '" << msg << "', got: " << got.status().message();
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " renderings";
}

TEST(JinjaLimits, HostileTemplatesFailCleanly) {
  const OJson ctx = OJson::object();
  const char* bad[] = {
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",  // runs too long
      "{{ 'x' * 1000000000 }}",                                                              // huge string
      "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",                                 // unbounded recursion
      "{{ range(1000000000) | length }}",                                                    // huge list
  };
  for (const char* src : bad) {
    SCOPED_TRACE(src);
    auto t = jinja::Template::Parse(src);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_FALSE(t->Render(ctx).ok());
  }
  std::string deep(5000, '(');
  EXPECT_FALSE(jinja::Template::Parse("{{ " + deep + " }}").ok());
  std::string nested;
  for (int i = 0; i < 1000; ++i) nested += "{% if true %}";
  EXPECT_FALSE(jinja::Template::Parse(nested).ok());
}

TEST(JinjaLimits, SyntaxErrorsNameTheLine) {
  auto t = jinja::Template::Parse("line one\n{{ ok }}\n{% if %}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 3"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace infera::jinja_reference_test
