// ApiServer's routes of OpenAI's Responses API (responses_api.h):
// POST /v1/responses runs as a chat completion (CompletionJob answers in the
// Responses shape); POST /v1/responses/input_tokens counts; GET / DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items and POST
// /v1/responses/{id}/cancel read the in-memory store.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "base/json.h"
#include "server/api_responses.h"
#include "server/api_server.h"
#include "server/responses_api.h"

namespace infera::server {

using nlohmann::json;

namespace {

// The value of query parameter `name` in `target` ("" when absent), with
// %XX and '+' decoded.
std::string QueryParam(const std::string& target, const std::string& name) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  size_t pos = q + 1;
  while (pos <= target.size()) {
    size_t end = target.find('&', pos);
    if (end == std::string::npos) end = target.size();
    const std::string pair = target.substr(pos, end - pos);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      const std::string raw = eq == std::string::npos ? "" : pair.substr(eq + 1);
      std::string out;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '+') {
          out += ' ';
        } else if (raw[i] == '%' && i + 2 < raw.size() && std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
                   std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
          out += static_cast<char>(std::stoi(raw.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          out += raw[i];
        }
      }
      return out;
    }
    pos = end + 1;
  }
  return "";
}

ApiError NotFound(const std::string& id) {
  return Error(404, fmt::format("Response with id '{}' not found.", id), "invalid_request_error", "not_found");
}

}  // namespace

void ApiServer::HandleResponses(HttpRequest& req, const std::shared_ptr<Responder>& resp, const TraceContext& trace,
                                const std::string& request_id) {
  const std::string& path = req.path;
  if (req.method == "POST" && (path == "/v1/responses" || path == "/v1/responses/input_tokens")) {
    const bool count = path == "/v1/responses/input_tokens";
    auto turn = std::make_shared<ResponsesTurn>();
    ApiError err;
    const size_t sep = request_id.find('_');
    const std::string suffix = sep == std::string::npos ? request_id : request_id.substr(sep + 1);
    if (!ResponsesToChatRequest(req.body, responses_store_.get(), count, suffix, turn.get(), &err)) {
      return SendError(resp, err);
    }
    if (responses_store_->capacity() == 0) {  // nothing is kept (--responses-store 0)
      turn->store = false;
      turn->echo["store"] = false;
    }
    req.body = turn->chat_body;
    if (count) {
      ParseContext ctx = MakeParseContext();
      ctx.limits.max_model_len = std::numeric_limits<int32_t>::max();  // counting, not generating
      CompletionSpec spec;
      if (!ParseCompletionRequest(req.body, /*chat=*/true, ctx, &spec, &err)) {
        err.param = ResponsesParam(err.param);
        return SendError(resp, err);
      }
      return SendJson(resp, 200, {{"object", "response.input_tokens"}, {"input_tokens", spec.prompts[0].size()}});
    }
    return HandleCompletion(req, resp, true, trace, request_id, CompletionApi::kResponses, std::move(turn));
  }
  // /v1/responses/{id}[/input_items | /cancel]
  std::string rest = path.substr(std::string("/v1/responses/").size());
  std::string action;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    action = rest.substr(slash + 1);
    rest.resize(slash);
  }
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (rest.empty() || !((get && (action.empty() || action == "input_items")) ||
                        (req.method == "DELETE" && action.empty()) || (req.method == "POST" && action == "cancel"))) {
    return SendError(resp, Error(404,
                                 fmt::format("no route {} {} (GET|DELETE /v1/responses/{{id}}, GET "
                                             "/v1/responses/{{id}}/input_items, POST /v1/responses/{{id}}/cancel)",
                                             req.method, path),
                                 "invalid_request_error", "not_found"));
  }
  if (req.method == "DELETE") {
    if (!responses_store_->Erase(rest)) return SendError(resp, NotFound(rest));
    return SendJson(resp, 200, {{"id", rest}, {"object", "response"}, {"deleted", true}});
  }
  std::shared_ptr<const StoredResponse> stored = responses_store_->Get(rest);
  if (stored == nullptr) return SendError(resp, NotFound(rest));
  if (action == "cancel") {
    return SendError(resp, BadValue("response_id",
                                    "Only background responses can be cancelled (this server runs "
                                    "none: background is not supported)"));
  }
  if (action.empty()) return resp->Respond(200, "application/json", DumpJson(stored->response));
  // input_items: a page of this response's input items (order desc by default).
  const std::string order = QueryParam(req.target, "order");
  const std::string limit_text = QueryParam(req.target, "limit");
  const std::string after = QueryParam(req.target, "after");
  if (!order.empty() && order != "asc" && order != "desc") {
    return SendError(resp, BadValue("order", "'order' must be asc or desc"));
  }
  int64_t limit = 20;
  if (!limit_text.empty()) {
    char* end = nullptr;
    limit = std::strtoll(limit_text.c_str(), &end, 10);
    if (*end != '\0' || limit < 1 || limit > 100) {
      return SendError(resp, BadValue("limit", "'limit' must be an integer from 1 to 100"));
    }
  }
  std::vector<nlohmann::ordered_json> items(stored->input_items.begin(), stored->input_items.end());
  if (order != "asc") std::reverse(items.begin(), items.end());
  size_t start = 0;
  if (!after.empty()) {
    auto it = std::find_if(items.begin(), items.end(), [&](const auto& item) { return item.value("id", "") == after; });
    if (it == items.end()) return SendError(resp, BadValue("after", fmt::format("no input item '{}'", after)));
    start = static_cast<size_t>(it - items.begin()) + 1;
  }
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  for (size_t i = start; i < items.size() && data.size() < static_cast<size_t>(limit); ++i) data.push_back(items[i]);
  nlohmann::ordered_json page = {{"object", "list"},
                                 {"data", data},
                                 {"first_id", data.empty() ? nlohmann::ordered_json() : data.front()["id"]},
                                 {"last_id", data.empty() ? nlohmann::ordered_json() : data.back()["id"]},
                                 {"has_more", start + data.size() < items.size()}};
  resp->Respond(200, "application/json", DumpJson(page));
}

}  // namespace infera::server
