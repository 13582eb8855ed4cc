// The Python API's value types bound to Python (py_value_types.h).
#include "python/py_value_types.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/json.h"
#include "python/py_lora.h"
#include "python/py_outputs.h"
#include "python/py_sampling_params.h"
#include "server/output_constraints.h"

namespace infera::python {

void BindValueTypes(py::module_& m) {
  py::class_<PyGuidedDecodingParams>(m, "GuidedDecodingParams")
      .def(
          py::init([](py::object json, std::optional<std::string> regex, std::optional<std::vector<std::string>> choice,
                      std::optional<std::string> grammar, bool json_object) {
            nlohmann::json body = nlohmann::json::object();
            int given = 0;
            if (!json.is_none()) {
              // A schema as a dict (or any JSON value) or as its text.
              body["guided_json"] = py::isinstance<py::str>(json)
                                        ? json.cast<std::string>()
                                        : py::module_::import("json").attr("dumps")(json).cast<std::string>();
              ++given;
            }
            if (regex) {
              body["guided_regex"] = *regex;
              ++given;
            }
            if (choice) {
              body["guided_choice"] = *choice;
              ++given;
            }
            if (grammar) {
              body["guided_grammar"] = *grammar;
              ++given;
            }
            if (json_object) {
              body["response_format"] = {{"type", "json_object"}};
              ++given;
            }
            if (given != 1) throw py::value_error("give exactly one of json, regex, choice, grammar, json_object");
            PyGuidedDecodingParams g;
            infera::server::ApiError err;
            if (!infera::server::ParseOutputConstraint(body, &g.grammar, &err)) throw py::value_error(err.message);
            if (!g.grammar) throw py::value_error("the constraint is empty");
            g.description = infera::DumpJson(body);
            return g;
          }),
          py::kw_only(), py::arg("json") = py::none(), py::arg("regex") = py::none(), py::arg("choice") = py::none(),
          py::arg("grammar") = py::none(), py::arg("json_object") = false)
      .def("__repr__", [](const PyGuidedDecodingParams& g) { return "GuidedDecodingParams(" + g.description + ")"; });

  py::class_<PyLoRARequest>(m, "LoRARequest")
      .def(py::init([](std::string name, int64_t id, std::string path) {
             if (id < 1) throw py::value_error("lora_int_id must be positive");
             return PyLoRARequest{std::move(name), id, std::move(path)};
           }),
           py::arg("lora_name"), py::arg("lora_int_id"), py::arg("lora_path") = "")
      .def_readonly("lora_name", &PyLoRARequest::lora_name)
      .def_readonly("lora_int_id", &PyLoRARequest::lora_int_id)
      .def_readonly("lora_path", &PyLoRARequest::lora_path)
      .def("__repr__", [](const PyLoRARequest& r) {
        return "LoRARequest(lora_name='" + r.lora_name + "', lora_int_id=" + std::to_string(r.lora_int_id) +
               ", lora_path='" + r.lora_path + "')";
      });

  py::class_<PySamplingParams>(m, "SamplingParams")
      .def(py::init([](int n, float temperature, float top_p, int top_k, float min_p, float presence_penalty,
                       float frequency_penalty, float repetition_penalty, std::optional<uint64_t> seed,
                       std::optional<int> max_tokens, int min_tokens, py::object stop, bool ignore_eos,
                       std::optional<int> logprobs, std::optional<int> prompt_logprobs,
                       std::optional<std::vector<int32_t>> stop_token_ids, bool detokenize, bool skip_special_tokens,
                       bool spaces_between_special_tokens, bool include_stop_str_in_output,
                       std::optional<PyGuidedDecodingParams> guided_decoding) {
             // vLLM's text options, at the values infera's output has.
             if (!spaces_between_special_tokens)
               throw py::value_error("spaces_between_special_tokens=False is not supported");
             PySamplingParams p;
             p.n = n;
             p.temperature = temperature;
             p.top_p = top_p;
             p.top_k = top_k;
             p.min_p = min_p;
             p.presence_penalty = presence_penalty;
             p.frequency_penalty = frequency_penalty;
             p.repetition_penalty = repetition_penalty;
             p.seed = seed;
             p.max_tokens = max_tokens;
             p.min_tokens = min_tokens;
             if (py::isinstance<py::str>(stop)) {
               p.stop.push_back(stop.cast<std::string>());
             } else if (!stop.is_none()) {
               p.stop = stop.cast<std::vector<std::string>>();
             }
             p.ignore_eos = ignore_eos;
             p.logprobs = logprobs;
             p.prompt_logprobs = prompt_logprobs;
             p.stop_token_ids = stop_token_ids.value_or(std::vector<int32_t>{});
             p.detokenize = detokenize;
             p.include_stop_str_in_output = include_stop_str_in_output;
             p.skip_special_tokens = skip_special_tokens;
             p.guided_decoding = std::move(guided_decoding);
             p.ToRequest();  // ValueError now rather than at generate()
             return p;
           }),
           py::kw_only(), py::arg("n") = 1, py::arg("temperature") = 1.0f, py::arg("top_p") = 1.0f,
           py::arg("top_k") = -1, py::arg("min_p") = 0.0f, py::arg("presence_penalty") = 0.0f,
           py::arg("frequency_penalty") = 0.0f, py::arg("repetition_penalty") = 1.0f, py::arg("seed") = py::none(),
           py::arg("max_tokens") = 16, py::arg("min_tokens") = 0, py::arg("stop") = py::none(),
           py::arg("ignore_eos") = false, py::arg("logprobs") = py::none(), py::arg("prompt_logprobs") = py::none(),
           py::arg("stop_token_ids") = py::none(), py::arg("detokenize") = true, py::arg("skip_special_tokens") = true,
           py::arg("spaces_between_special_tokens") = true, py::arg("include_stop_str_in_output") = false,
           py::arg("guided_decoding") = py::none())
      .def_readwrite("n", &PySamplingParams::n)
      .def_readwrite("temperature", &PySamplingParams::temperature)
      .def_readwrite("top_p", &PySamplingParams::top_p)
      .def_readwrite("top_k", &PySamplingParams::top_k)
      .def_readwrite("min_p", &PySamplingParams::min_p)
      .def_readwrite("presence_penalty", &PySamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &PySamplingParams::frequency_penalty)
      .def_readwrite("repetition_penalty", &PySamplingParams::repetition_penalty)
      .def_readwrite("seed", &PySamplingParams::seed)
      .def_readwrite("max_tokens", &PySamplingParams::max_tokens)
      .def_readwrite("min_tokens", &PySamplingParams::min_tokens)
      .def_readwrite("stop", &PySamplingParams::stop)
      .def_readwrite("ignore_eos", &PySamplingParams::ignore_eos)
      .def_readwrite("stop_token_ids", &PySamplingParams::stop_token_ids)
      .def_readwrite("detokenize", &PySamplingParams::detokenize)
      .def_readwrite("include_stop_str_in_output", &PySamplingParams::include_stop_str_in_output)
      .def_readwrite("skip_special_tokens", &PySamplingParams::skip_special_tokens)
      .def_readwrite("logprobs", &PySamplingParams::logprobs)
      .def_readwrite("prompt_logprobs", &PySamplingParams::prompt_logprobs)
      .def_readwrite("guided_decoding", &PySamplingParams::guided_decoding)
      .def("__repr__", [](const PySamplingParams& p) {
        return "SamplingParams(n=" + std::to_string(p.n) + ", temperature=" + std::to_string(p.temperature) +
               ", top_p=" + std::to_string(p.top_p) + ", top_k=" + std::to_string(p.top_k) +
               ", max_tokens=" + (p.max_tokens ? std::to_string(*p.max_tokens) : "None") + ")";
      });

  py::class_<PyLogprob>(m, "Logprob")
      .def_readonly("logprob", &PyLogprob::logprob)
      .def_readonly("rank", &PyLogprob::rank)
      .def_readonly("decoded_token", &PyLogprob::decoded_token)
      .def("__repr__", [](const PyLogprob& l) {
        return "Logprob(logprob=" + py::repr(py::float_(l.logprob)).cast<std::string>() +
               ", rank=" + std::to_string(l.rank) +
               ", decoded_token=" + py::repr(py::str(l.decoded_token)).cast<std::string>() + ")";
      });

  py::class_<PyCompletionOutput>(m, "CompletionOutput")
      .def_readonly("index", &PyCompletionOutput::index)
      .def_readonly("text", &PyCompletionOutput::text)
      .def_readonly("token_ids", &PyCompletionOutput::token_ids)
      .def_readonly("finish_reason", &PyCompletionOutput::finish_reason)
      .def_readonly("stop_reason", &PyCompletionOutput::stop_reason)
      .def_readonly("logprobs", &PyCompletionOutput::logprobs)
      .def_readonly("cumulative_logprob", &PyCompletionOutput::cumulative_logprob)
      .def("__repr__", [](const PyCompletionOutput& c) {
        return "CompletionOutput(index=" + std::to_string(c.index) +
               ", text=" + py::repr(py::str(c.text)).cast<std::string>() +
               ", finish_reason=" + c.finish_reason.value_or("None") + ")";
      });

  py::class_<PyRequestOutput>(m, "RequestOutput")
      .def_readonly("request_id", &PyRequestOutput::request_id)
      .def_readonly("prompt", &PyRequestOutput::prompt)
      .def_readonly("prompt_token_ids", &PyRequestOutput::prompt_token_ids)
      .def_readonly("prompt_logprobs", &PyRequestOutput::prompt_logprobs)
      .def_readonly("outputs", &PyRequestOutput::outputs)
      .def_readonly("finished", &PyRequestOutput::finished)
      .def_readonly("num_cached_tokens", &PyRequestOutput::num_cached_tokens)
      .def("__repr__", [](const PyRequestOutput& r) {
        return "RequestOutput(request_id=" + r.request_id + ", outputs=" + std::to_string(r.outputs.size()) + ")";
      });
}

}  // namespace infera::python
