#include "kv_offload/redis_tier.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <charconv>

#include <fmt/format.h>

namespace infera::kv_offload {
namespace {

timeval Tv(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

bool ParseInt(const std::string& s, int* out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// One command's reply (Unavailable on I/O error or timeout).
StatusOr<Reply> ReadReply(redisContext* c) {
  void* raw = nullptr;
  if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) {
    return Unavailable(fmt::format("redis: {}", c->err ? c->errstr : "no reply"));
  }
  return Reply(static_cast<redisReply*>(raw));
}

Status AppendArgv(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
    return Unavailable(fmt::format("redis: {}", c->errstr));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<RedisUrl> ParseRedisUrl(const std::string& url) {
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) return InvalidArgument(fmt::format("--kv-offload-redis '{}': expected redis://host:port[/db]", url));
  std::string rest = url.substr(scheme.size());
  RedisUrl u;
  if (const auto at = rest.rfind('@'); at != std::string::npos) {
    std::string cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = cred.find(':');
    u.password = colon == std::string::npos ? cred : cred.substr(colon + 1);
  }
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty() && (!ParseInt(db, &u.db) || u.db < 0)) {
      return InvalidArgument(fmt::format("--kv-offload-redis '{}': bad database number", url));
    }
  }
  if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    if (!ParseInt(rest.substr(colon + 1), &u.port) || u.port <= 0 || u.port > 65535) {
      return InvalidArgument(fmt::format("--kv-offload-redis '{}': bad port", url));
    }
    rest = rest.substr(0, colon);
  }
  if (!rest.empty()) u.host = rest;
  return u;
}

RedisTier::RedisTier(RedisUrl url, int timeout_ms, int max_connections)
    : url_(std::move(url)), timeout_ms_(std::max(1, timeout_ms)), max_connections_(std::max(1, max_connections)) {}

RedisTier::~RedisTier() {
  for (redisContext* c : idle_) redisFree(c);
}

void RedisTier::DropIdle() {
  std::vector<redisContext*> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle.swap(idle_);
  }
  for (redisContext* c : idle) redisFree(c);
}

StatusOr<redisContext*> RedisTier::Acquire(bool fresh) {
  if (!fresh) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      redisContext* c = idle_.back();
      idle_.pop_back();
      return c;
    }
  }
  redisContext* c = redisConnectWithTimeout(url_.host.c_str(), url_.port, Tv(timeout_ms_));
  if (c == nullptr) return Unavailable("redis: out of memory");
  if (c->err) {
    Status st = Unavailable(fmt::format("redis {}:{}: {}", url_.host, url_.port, c->errstr));
    redisFree(c);
    return st;
  }
  redisSetTimeout(c, Tv(timeout_ms_));
  // Keep the reader's buffer between replies: by default hiredis frees it
  // whenever it empties, so every block of a multi-MiB MGET reply regrows it
  // from 16 KiB through fresh (page-faulting) allocations.
  c->reader->maxbuf = 0;
  std::vector<std::vector<std::string>> hello;
  if (!url_.password.empty()) hello.push_back({"AUTH", url_.password});
  if (url_.db != 0) hello.push_back({"SELECT", std::to_string(url_.db)});
  for (const auto& cmd : hello) {
    Status st = AppendArgv(c, cmd);
    StatusOr<Reply> r = st.ok() ? ReadReply(c) : StatusOr<Reply>(st);
    if (!r.ok() || (*r)->type == REDIS_REPLY_ERROR) {
      Status bad = r.ok() ? Unavailable(fmt::format("redis {}: {}", cmd[0], (*r)->str)) : r.status();
      redisFree(c);
      return bad;
    }
  }
  return c;
}

void RedisTier::Release(redisContext* c, bool healthy) {
  if (healthy && c->err == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(idle_.size()) < max_connections_) {
      idle_.push_back(c);
      return;
    }
  }
  redisFree(c);
}

Status RedisTier::Pipeline(const std::vector<std::vector<std::string>>& cmds, bool want_ok) {
  if (cmds.empty()) return Status::Ok();
  Status st = PipelineOnce(cmds, want_ok, false);
  if (st.code() != StatusCode::kUnavailable) return st;
  DropIdle();
  return PipelineOnce(cmds, want_ok, true);
}

Status RedisTier::PipelineOnce(const std::vector<std::vector<std::string>>& cmds, bool want_ok, bool fresh) {
  ASSIGN_OR_RETURN(redisContext* c, Acquire(fresh));
  Status st;
  for (const auto& cmd : cmds) {
    st = AppendArgv(c, cmd);
    if (!st.ok()) break;
  }
  size_t read = 0;
  for (; st.ok() && read < cmds.size(); ++read) {
    StatusOr<Reply> r = ReadReply(c);
    if (!r.ok()) {
      st = r.status();
      break;
    }
    if ((*r)->type == REDIS_REPLY_ERROR) {
      // e.g. OOM under maxmemory: later replies still come, keep reading.
      if (st.ok()) st = ResourceExhausted(fmt::format("redis: {}", (*r)->str));
      continue;
    }
    if (want_ok && (*r)->type != REDIS_REPLY_STATUS) st = Unavailable("redis: unexpected reply to SET");
  }
  // A connection with replies left unread is out of step: drop it.
  Release(c, read == cmds.size() && c->err == 0);
  return st;
}

Status RedisTier::Put(const std::vector<std::pair<std::string, std::string>>& items, int64_t ttl_seconds) {
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(items.size());
  for (const auto& [k, v] : items) {
    if (ttl_seconds > 0) cmds.push_back({"SET", k, v, "EX", std::to_string(ttl_seconds)});
    else cmds.push_back({"SET", k, v});
  }
  return Pipeline(cmds, /*want_ok=*/true);
}

StatusOr<std::vector<Blob>> RedisTier::Get(const std::vector<std::string>& keys) {
  // MGET in slices, so replies stay a few MiB; a slice with a miss ends the
  // lookup (callers use the leading run of hits; later keys read as misses).
  constexpr size_t kSlice = 32;
  std::vector<Blob> out(keys.size());
  for (size_t i = 0; i < keys.size(); i += kSlice) {
    const std::vector<std::string> slice(keys.begin() + static_cast<std::ptrdiff_t>(i),
                                         keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), i + kSlice)));
    auto r = GetOnce(slice, false);
    if (!r.ok() && r.status().code() == StatusCode::kUnavailable) {
      DropIdle();
      r = GetOnce(slice, true);
    }
    if (!r.ok()) return r.status();
    bool miss = false;
    for (size_t j = 0; j < slice.size(); ++j) {
      miss = miss || (*r)[j].empty();
      out[i + j] = std::move((*r)[j]);
    }
    if (miss) break;
  }
  return out;
}

StatusOr<std::vector<Blob>> RedisTier::GetOnce(const std::vector<std::string>& keys, bool fresh) {
  std::vector<Blob> out(keys.size());
  ASSIGN_OR_RETURN(redisContext* c, Acquire(fresh));
  std::vector<std::string> cmd = {"MGET"};
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  Status st = AppendArgv(c, cmd);
  StatusOr<Reply> r = st.ok() ? ReadReply(c) : StatusOr<Reply>(st);
  if (!r.ok()) {
    Release(c, false);
    return r.status();
  }
  Release(c, true);
  std::shared_ptr<const redisReply> rep(r->release(), [](const redisReply* x) {
    freeReplyObject(const_cast<redisReply*>(x));
  });
  if (rep->type == REDIS_REPLY_ERROR) return Unavailable(fmt::format("redis MGET: {}", rep->str));
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != keys.size()) return Unavailable("redis MGET: malformed reply");
  for (size_t i = 0; i < keys.size(); ++i) {
    const redisReply* e = rep->element[i];
    if (e->type == REDIS_REPLY_STRING) out[i] = Blob{std::string_view(e->str, e->len), rep};  // the reply owns the bytes
    else if (e->type != REDIS_REPLY_NIL) return Unavailable("redis MGET: malformed element");
  }
  return out;
}

Status RedisTier::Touch(const std::vector<std::string>& keys, int64_t ttl_seconds) {
  if (ttl_seconds <= 0) return Status::Ok();
  std::vector<std::vector<std::string>> cmds;
  for (const std::string& k : keys) cmds.push_back({"EXPIRE", k, std::to_string(ttl_seconds)});
  return Pipeline(cmds, /*want_ok=*/false);
}

Status RedisTier::Delete(const std::vector<std::string>& keys) {
  if (keys.empty()) return Status::Ok();
  std::vector<std::string> cmd = {"DEL"};
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  return Pipeline({cmd}, /*want_ok=*/false);
}

}  // namespace infera::kv_offload
