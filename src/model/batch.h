// One flat batch of tokens from any number of sequences: what the forward
// pass consumes. Plain data; built by the caller (generator / engine).
#pragma once

#include <cstdint>
#include <vector>

namespace infera {

struct LoraAdapter;  // model/lora.h

struct ForwardBatch {
  // Per token [n_tokens]:
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;  // position within its sequence
  std::vector<int32_t> seq;        // index into seq_slots
  // Per sequence: the KV slot of each position 0..len-1, covering at least
  // every position in this batch (the K/V of batch tokens are written there).
  std::vector<const std::vector<int32_t>*> seq_slots;
  // Per sequence, with LoRA adapters (model/lora.h): null, or one scale per
  // entry of lora_adapters (0: off). Empty: no sequence uses an adapter.
  std::vector<const float*> seq_lora;
  // The adapters seq_lora's scales refer to, by slot (null: an empty slot,
  // whose scale must be 0). Not owned: they outlive the forward pass.
  std::vector<const LoraAdapter*> lora_adapters;
  // Token indices (into tokens) whose logits are wanted, in output order.
  std::vector<int32_t> logit_rows;
  // Token indices whose final hidden state (after the final norm, before
  // the output projection) is wanted, in output order: embeddings.
  std::vector<int32_t> hidden_rows;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  void Clear() {
    tokens.clear();
    positions.clear();
    seq.clear();
    seq_slots.clear();
    seq_lora.clear();
    lora_adapters.clear();
    logit_rows.clear();
    hidden_rows.clear();
  }
  // Appends one token of sequence `s`.
  void Add(int32_t token, int32_t pos, int32_t s, bool want_logits) {
    if (want_logits) logit_rows.push_back(size());
    tokens.push_back(token);
    positions.push_back(pos);
    seq.push_back(s);
  }
};

}  // namespace infera
