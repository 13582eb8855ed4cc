// The Python API's value types bound to Python: GuidedDecodingParams,
// LoRARequest, SamplingParams (vLLM's arguments and defaults) and the result
// types Logprob, CompletionOutput, RequestOutput. The LLM class and the
// embedding results are bound in infera_module.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace infera::python {

// Adds the classes above to the module `m` (called once, at import).
void BindValueTypes(pybind11::module_& m);

}  // namespace infera::python
