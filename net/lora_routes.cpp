// Runtime LoRA adapters (vLLM's routes, with allow_runtime_lora_updating):
//   POST /v1/load_lora_adapter   {"lora_name": ..., "lora_path": ...}
//   POST /v1/unload_lora_adapter {"lora_name": ...}
// Without the setting both are 404, as vLLM's absent routes. A path must
// lie inside one of lora_allowed_dirs once both are resolved (symlinks and
// `..`, relative paths against the server's working directory); the
// adapter is then read from the resolved path, so a link swapped after the
// check cannot lead elsewhere; the read runs on the LoRA registry's loader
// thread, so the HTTP thread serves other connections meanwhile. A
// refusal is a 400 and the server log says why. Unloading takes the name away at once; requests still running with
// the adapter finish with it (lora_registry).
#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "config/logging.h"
#include "net/routes.h"

namespace troupe {

namespace {

namespace fs = std::filesystem;

struct lora_request {
  std::string name, path;
};

std::variant<lora_request, api_error> parse_lora_request(std::string_view body, bool with_path) {
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(body.data(), body.size()).get(obj) != simdjson::SUCCESS) {
    return bad_request("the body must be a JSON object");
  }
  lora_request r;
  std::string_view v;
  if (obj["lora_name"].get(v) != simdjson::SUCCESS || v.empty()) {
    return bad_request("lora_name: a non-empty string is required", "lora_name");
  }
  r.name = std::string(v);
  if (with_path) {
    if (obj["lora_path"].get(v) != simdjson::SUCCESS || v.empty()) {
      return bad_request("lora_path: a non-empty string is required", "lora_path");
    }
    r.path = std::string(v);
  }
  return r;
}

// `path` resolved, when it lies in one of `dirs` (resolved too); else
// nullopt and `why`.
std::optional<fs::path> resolve_allowed(const std::string& path, const std::vector<std::string>& dirs,
                                        std::string& why) {
  if (dirs.empty()) {
    why = "lora_allowed_dirs is empty: no directory is open to runtime loading";
    return std::nullopt;
  }
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) {
    why = "cannot resolve '" + path + "': " + ec.message();
    return std::nullopt;
  }
  for (const std::string& dir : dirs) {
    const fs::path root = fs::weakly_canonical(fs::absolute(dir, ec), ec);
    if (ec) continue;
    auto [r, p] = std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
    if (r == root.end() || (std::next(r) == root.end() && r->empty())) return resolved;
  }
  why = "'" + path + "' resolves to '" + resolved.string() + "', outside lora_allowed_dirs";
  return std::nullopt;
}

}  // namespace

route_result api_routes::load_lora(std::string_view body) const {
  const std::shared_ptr<lora_registry> loras = engine_.loras();
  auto parsed = parse_lora_request(body, true);
  if (auto* e = std::get_if<api_error>(&parsed)) return error_reply(*e);
  const lora_request& r = std::get<lora_request>(parsed);
  for (const std::string& served : served_names_) {
    if (served == r.name) return error_reply(bad_request("lora_name: '" + r.name + "' is the base model's name", "lora_name"));
  }
  if (loras->id_of(r.name) != 0) {
    return error_reply(bad_request("The lora adapter '" + r.name + "' has already been loaded.", "lora_name"));
  }
  std::string why;
  const std::optional<fs::path> path = resolve_allowed(r.path, lora_allowed_dirs_, why);
  if (!path) {
    get_logger("lora")->warn("load_lora_adapter '{}' refused: {}", r.name, why);
    return error_reply(bad_request("lora_path: '" + r.path + "' is not inside lora_allowed_dirs", "lora_path"));
  }
  // The read and checks run on the registry's loader thread; the reply
  // follows when they end.
  deferred_reply later;
  later.start = [loras, name = r.name, where = *path](std::function<void(http_reply)> reply) {
    loras->add_async(name, where, [name, where, reply = std::move(reply)](result<int64_t> added) {
      if (!added) {
        get_logger("lora")->warn("load_lora_adapter '{}' failed: {}", name, added.error_message());
        reply(error_reply(bad_request(added.error_message(), "lora_path")));
        return;
      }
      get_logger("lora")->info("loaded LoRA adapter '{}' from {} (id {})", name, where.string(), *added);
      reply(http_reply{200, "text/plain", "Success: LoRA adapter '" + name + "' added successfully.", {}});
    });
  };
  return later;
}

http_reply api_routes::unload_lora(std::string_view body) const {
  auto parsed = parse_lora_request(body, false);
  if (auto* e = std::get_if<api_error>(&parsed)) return error_reply(*e);
  const lora_request& r = std::get<lora_request>(parsed);
  if (status s = engine_.loras()->remove(r.name); !s) {
    return error_reply(api_error{404, s.error_message(), "lora_name"});
  }
  get_logger("lora")->info("unloaded LoRA adapter '{}'", r.name);
  return http_reply{200, "text/plain", "Success: LoRA adapter '" + r.name + "' removed successfully.", {}};
}

}  // namespace troupe
