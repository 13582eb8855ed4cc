// A Jinja chat template: parsed once, rendered per request.
//
//   ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(source));
//   ASSIGN_OR_RETURN(std::string prompt, t.Render(context));
//
// Covers what Hugging Face chat templates use (statements if / for / set /
// macro / filter / break / continue / do / generation / raw; Python-like
// expressions with filters, tests, slicing and str / dict methods), rendered
// as transformers renders them (Jinja2 with trim_blocks and lstrip_blocks,
// tojson as json.dumps with ensure_ascii=False, raise_exception and
// strftime_now available). Templates are untrusted input: parsing and
// rendering are bounded (RenderLimits) and every failure is a Status.
//
// Thread-safety: a Template is immutable; Render may run on many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "infera/status.h"
#include "jinja/interpreter.h"

namespace infera::jinja {

struct Program;

class Template {
 public:
  // InvalidArgument with "line N: ..." on a syntax error.
  static StatusOr<Template> Parse(std::string_view source);

  // `context` must be an object; its members become the template's globals
  // (messages, add_generation_prompt, bos_token, tools, ...). A template that
  // calls raise_exception(msg) yields InvalidArgument(msg); other run-time
  // errors are InvalidArgument with the line.
  StatusOr<std::string> Render(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;

  const std::string& source() const { return *source_; }

 private:
  std::shared_ptr<const Program> program_;
  std::shared_ptr<const std::string> source_;
};

}  // namespace infera::jinja
