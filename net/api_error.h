// api_error: the one mapping from request problems to HTTP statuses and
// OpenAI's error envelope {"error":{"message","type","param","code"}}, with
// vLLM's statuses and type names. Plain values; no Beast inside.
#pragma once

#include <string>

namespace troupe {

struct api_error {
  int status = 400;
  std::string message;
  std::string param;  // "" -> null
};

inline api_error bad_request(std::string message, std::string param = "") {
  return {400, std::move(message), std::move(param)};
}

// "BadRequestError", "AuthenticationError", "NotFoundError", ...
const char* api_error_type(int status);

// The JSON envelope; `code` is the status number, as vLLM writes it.
std::string api_error_body(const api_error& e);

}  // namespace troupe
