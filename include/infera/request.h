// Why a generation ended.
#pragma once

namespace infera {

enum class FinishReason {
  kNone = 0,      // still running
  kStop,          // end-of-generation token or a stop string
  kLength,        // max_tokens reached
  kContextFull,   // the context window is full
  kCancelled,
  kError,
};

inline const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kContextFull: return "context_full";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

// OpenAI's / vLLM's finish_reason for a finished request: the context end
// is "length" too; a cancelled one "abort".
inline const char* OpenAiFinishReason(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
    case FinishReason::kContextFull:
      return "length";
    case FinishReason::kCancelled:
      return "abort";
    default:
      return "error";
  }
}

}  // namespace infera
