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

}  // namespace infera
