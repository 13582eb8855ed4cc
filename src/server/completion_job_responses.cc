// CompletionJob's answers in the shape of OpenAI's Responses API
// (responses_api.h): the response object, and its streamed events —
// response.created, response.in_progress, then per output item
// output_item.added, (content_part.added, output_text.delta...,
// output_text.done, content_part.done | function_call_arguments.delta,
// function_call_arguments.done), output_item.done, and response.completed /
// response.incomplete / response.failed.
#include <chrono>

#include "base/json.h"
#include "server/completion_job.h"

namespace infera::server {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

void CompletionJob::SetResponses(std::shared_ptr<const ResponsesTurn> turn, ResponsesStore* store) {
  responses_ = std::make_unique<ResponsesState>();
  responses_->turn = std::move(turn);
  responses_->store = store;
  const size_t sep = id_.find('_');
  responses_->id_suffix = sep == std::string::npos ? id_ : id_.substr(sep + 1);
  responses_->out.logprobs = ojson::array();
}

void CompletionJob::ResponsesEvent(const char* type, ojson j) {
  ojson event = {{"type", type}};
  for (auto& [key, value] : j.items()) event[key] = std::move(value);
  event["sequence_number"] = responses_->seq++;
  resp_->Send(std::string("event: ") + type + "\ndata: " + DumpJson(event) + "\n\n");
}

void CompletionJob::ResponsesStreamStart() {
  const ojson r = ResponseObject(*responses_->turn, id_, created_, model_, "in_progress", ojson::array(), nullptr);
  ResponsesEvent("response.created", {{"response", r}});
  ResponsesEvent("response.in_progress", {{"response", r}});
}

void CompletionJob::ResponsesText(const std::string& text, const json& logprobs) {
  ResponsesState& st = *responses_;
  const std::string item_id = "msg_" + st.id_suffix;
  if (!st.message_open) {
    ResponsesOutput empty;
    empty.logprobs = ojson::array();
    ojson item = ResponsesMessageItem(st.id_suffix, empty, "in_progress", st.turn->logprobs);
    item["content"] = ojson::array();
    ResponsesEvent("response.output_item.added", {{"output_index", 0}, {"item", std::move(item)}});
    ojson part = {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}};
    if (st.turn->logprobs) part["logprobs"] = ojson::array();
    ResponsesEvent("response.content_part.added",
                   {{"item_id", item_id}, {"output_index", 0}, {"content_index", 0}, {"part", std::move(part)}});
    st.message_open = true;
  }
  ojson lps = ojson::array();
  if (logprobs.is_object() && logprobs.contains("content")) {
    for (const json& lp : logprobs["content"]) {
      lps.push_back(ojson(lp));
      st.out.logprobs.push_back(ojson(lp));
    }
  }
  st.out.text += text;
  ResponsesEvent(
      "response.output_text.delta",
      {{"item_id", item_id}, {"output_index", 0}, {"content_index", 0}, {"delta", text}, {"logprobs", std::move(lps)}});
}

void CompletionJob::ResponsesCloseMessage() {
  ResponsesState& st = *responses_;
  if (!st.message_open) return;
  st.message_open = false;
  const Choice& c = choices_[0];
  const bool cut = c.finish_reason != nullptr && std::string(c.finish_reason) == "length";
  const std::string item_id = "msg_" + st.id_suffix;
  ojson item = ResponsesMessageItem(st.id_suffix, st.out, cut ? "incomplete" : "completed", st.turn->logprobs);
  ojson part = item["content"][0];
  ojson done = {{"item_id", item_id}, {"output_index", 0}, {"content_index", 0}, {"text", st.out.text}};
  done["logprobs"] = st.turn->logprobs ? st.out.logprobs : ojson::array();
  ResponsesEvent("response.output_text.done", std::move(done));
  ResponsesEvent("response.content_part.done",
                 {{"item_id", item_id}, {"output_index", 0}, {"content_index", 0}, {"part", std::move(part)}});
  ResponsesEvent("response.output_item.done", {{"output_index", 0}, {"item", std::move(item)}});
}

void CompletionJob::ResponsesToolCalls(const std::vector<ToolCall>& calls) {
  ResponsesState& st = *responses_;
  ResponsesCloseMessage();
  const size_t first_index = st.out.text.empty() ? 0 : 1;
  for (const ToolCall& call : calls) {
    const size_t i = st.out.calls.size();
    const size_t output_index = first_index + i;
    ojson item = ResponsesCallItem(st.id_suffix, i, call, "in_progress");
    const std::string item_id = item["id"].get<std::string>();
    item["arguments"] = "";
    ResponsesEvent("response.output_item.added", {{"output_index", output_index}, {"item", std::move(item)}});
    ResponsesEvent("response.function_call_arguments.delta",
                   {{"item_id", item_id}, {"output_index", output_index}, {"delta", call.arguments}});
    ResponsesEvent(
        "response.function_call_arguments.done",
        {{"item_id", item_id}, {"output_index", output_index}, {"name", call.name}, {"arguments", call.arguments}});
    ResponsesEvent("response.output_item.done",
                   {{"output_index", output_index}, {"item", ResponsesCallItem(st.id_suffix, i, call, "completed")}});
    st.out.calls.push_back(call);
  }
}

ResponsesOutput CompletionJob::ResponsesResult() const {
  if (spec_.stream) return responses_->out;
  const Choice& c = choices_[0];
  ResponsesOutput out;
  out.text = c.text;
  if (spec_.parse_tool_calls) {
    ParsedReply r = ReplyWithTools(c, 0);
    out.text = std::move(r.content);
    out.calls = std::move(r.calls);
  }
  out.logprobs = ojson::array();
  if (responses_->turn->logprobs) {
    Choice copy = c;  // (LogprobsJson keeps a text offset)
    const json lp = LogprobsJson(copy, c.logprobs);
    for (const json& e : lp["content"]) out.logprobs.push_back(ojson(e));
  }
  return out;
}

void CompletionJob::ResponsesFinish() {
  ResponsesState& st = *responses_;
  if (cancelled_) {  // the client left: nothing to answer, and a cut-off reply is not kept to continue from
    if (spec_.stream) resp_->End();
    return;
  }
  const Choice& c = choices_[0];
  const ResponsesOutput out = ResponsesResult();
  const bool cut = c.finish_reason != nullptr && std::string(c.finish_reason) == "length";
  const char* status = !error_.empty() ? "failed" : cut ? "incomplete" : "completed";
  const Totals totals = Count();
  ResponsesUsage usage;
  usage.input = totals.prompt;
  usage.cached = totals.cached;
  usage.output = totals.completion;
  ojson r = ResponseObject(*st.turn, id_, created_, model_, status,
                           ResponsesOutputItems(st.id_suffix, out, cut ? "incomplete" : "completed", st.turn->logprobs),
                           &usage, error_);
  if (error_.empty() && !cut) {
    r["completed_at"] =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  if (st.turn->store && st.store != nullptr) {
    auto stored = std::make_shared<StoredResponse>();
    stored->response = r;
    stored->history = ResponsesHistoryAfter(*st.turn, out);
    stored->input_items = st.turn->input_items;
    st.store->Put(id_, std::move(stored));
  }
  if (spec_.stream) {
    ResponsesCloseMessage();
    ResponsesEvent(!error_.empty() ? "response.failed"
                   : cut           ? "response.incomplete"
                                   : "response.completed",
                   {{"response", std::move(r)}});
    resp_->End();
    return;
  }
  if (!error_.empty()) {
    ApiError err;
    err.status = unavailable_ ? 503 : not_found_ ? 404 : 500;
    err.type = unavailable_ ? "service_unavailable" : not_found_ ? "invalid_request_error" : "server_error";
    if (not_found_) err.code = "model_not_found";
    err.message = error_;
    resp_->Respond(err.status, "application/json", err.ToJson());
    return;
  }
  resp_->Respond(200, "application/json", DumpJson(r));
}

}  // namespace infera::server
