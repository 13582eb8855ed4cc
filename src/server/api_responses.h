// The server's small response helpers: an OpenAI-style error or a JSON body
// sent through a Responder. Shared by api_server.cc and
// api_server_llama.cc.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/json.h"
#include "server/http_server.h"
#include "server/openai_request.h"

namespace infera::server {

inline void SendError(const std::shared_ptr<Responder>& resp, const ApiError& err, Headers extra = {}) {
  resp->Respond(err.status, "application/json", err.ToJson(), std::move(extra));
}

inline ApiError Error(int status, std::string message, std::string type, std::string code, std::string param = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

inline void SendJson(const std::shared_ptr<Responder>& resp, int status, const nlohmann::json& body,
                     Headers extra = {}) {
  resp->Respond(status, "application/json", DumpJson(body), std::move(extra));
}

}  // namespace infera::server
