#include "net/api_error.h"

#include "common/json_writer.h"

namespace troupe {

const char* api_error_type(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 408: return "RequestTimeoutError";
    case 413: return "RequestEntityTooLargeError";
    case 422: return "UnprocessableEntityError";
    case 429: return "RateLimitError";
    case 501: return "NotImplementedError";
    case 503: return "ServiceUnavailableError";
    default: return "InternalServerError";
  }
}

std::string api_error_body(const api_error& e) {
  json_writer w;
  w.begin_object().key("error").begin_object();
  w.key("message").value(e.message);
  w.key("type").value(api_error_type(e.status));
  w.key("param");
  if (e.param.empty()) w.null(); else w.value(e.param);
  w.key("code").value(static_cast<int64_t>(e.status));
  w.end_object().end_object();
  return w.take();
}

}  // namespace troupe
