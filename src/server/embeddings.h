// POST /v1/embeddings (OpenAI's shape; vLLM's and llama.cpp's extra fields):
// parsing into token ids, and the job that runs every input through the
// engine as an embedding request (batched with whatever else runs) and
// answers once all are pooled.
//
// Thread-safety: EmbeddingJob's outputs arrive on the engine loop thread and
// the disconnect notice on an I/O thread; one mutex guards the job. Owned by
// its engine callbacks and the disconnect handler (shared_ptr).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/openai_request.h"

namespace infera::server {

struct EmbeddingSpec {
  std::string model;                         // as sent ("" if omitted)
  std::vector<std::vector<int32_t>> inputs;  // token ids of each input
  bool base64 = false;                       // encoding_format "base64"
  // llama.cpp's embd_normalize: -1 none, 0 max-absolute scaled to int16's
  // range (32760), 1 taxicab, 2 Euclidean (vLLM's normalize: true 2, false
  // -1), p > 2 the p-norm.
  int32_t embd_normalize = 2;
  // llama-server's /embedding: an array of {"index", "embedding": [vector]}
  // instead of OpenAI's list object.
  bool native = false;
  int32_t priority = 0;
  std::string user;
  std::vector<float> lora_scales;  // the server's LoRA scales (RequestParams::lora_scales)
  std::string lora_adapter;        // or the adapter the model names (RequestParams::lora_adapter)
};

struct EmbeddingLimits {
  int32_t max_model_len = 2048;
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  size_t max_inputs = 2048;  // OpenAI's limit per request
};

// Parses `body`. On failure returns false with *err set (400 naming the field).
bool ParseEmbeddingRequest(const std::string& body, const Tokenizer& tok, const EmbeddingLimits& limits,
                           EmbeddingSpec* out, ApiError* err);

// Scales `v` in place by llama.cpp's embd_normalize `norm` (see EmbeddingSpec);
// a zero vector stays zero.
void NormalizeEmbedding(int32_t norm, std::vector<float>* v);

// "float" embeddings as base64 of their little-endian float32 bytes (OpenAI's
// encoding_format "base64").
std::string Base64Floats(const std::vector<float>& v);

// How the server pools (--pooling, else the model's metadata, else last-token).
const char* PoolingName(Pooling p);
bool ParsePooling(const std::string& name, Pooling* out);

class EmbeddingJob : public std::enable_shared_from_this<EmbeddingJob> {
 public:
  EmbeddingJob(EmbeddingSpec spec, Pooling pooling, std::shared_ptr<Responder> resp, AsyncEngine* engine,
               std::string model_name);
  // Submits every input; answers at once if the engine refuses one.
  void Start();
  // The client is gone: cancel what runs.
  void CancelAll();

 private:
  void OnOutput(size_t index, const RequestOutput& o);
  void Fail(int status, const std::string& type, const std::string& code, const std::string& message);  // mu_ held

  const EmbeddingSpec spec_;
  const Pooling pooling_;
  const std::shared_ptr<Responder> resp_;
  AsyncEngine* const engine_;
  const std::string model_name_;

  std::mutex mu_;
  std::vector<uint64_t> ids_;                  // engine ids of the submitted inputs
  std::vector<std::vector<float>> embeddings_;  // per input, once pooled
  size_t remaining_ = 0;
  int64_t prompt_tokens_ = 0;
  bool answered_ = false;
};

}  // namespace infera::server
