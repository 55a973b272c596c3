// A blocking HTTP/1.1 client over a plain socket, for tests that must control
// the bytes on the wire: raw headers, a disconnect after some bytes of the
// response, a client that reads slowly. Every request is sent with
// "Connection: close"; the response is read to EOF (or the cut-off) and the
// chunked body, if any, decoded. Every call is bounded in time.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>

#include <chrono>
#include <string>
#include <thread>

namespace troupe::testing {

struct raw_response {
  int status = 0;         // 0: no status line
  std::string headers;    // as received, lower-cased names not assumed
  std::string body;       // de-chunked when chunked and complete
  bool complete = false;  // read to EOF (not cut off, no timeout)
};

struct raw_options {
  int64_t disconnect_after = -1;  // close after this many response bytes (-1: never)
  int slow_read_ms = 0;           // sleep between reads of 512 bytes
  int timeout_s = 60;
};

// "POST /path HTTP/1.1" with a JSON body (or "GET /path HTTP/1.1" when empty).
inline std::string http_request(const std::string& method, const std::string& target,
                                const std::string& body, const std::string& extra_headers = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                  extra_headers;
  if (!body.empty() || method == "POST") {
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

inline std::string dechunk(const std::string& in, bool& ok) {
  std::string out;
  size_t pos = 0;
  ok = false;
  while (pos < in.size()) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) return out;
    const size_t size = std::stoul(in.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) {
      ok = true;
      return out;
    }
    if (eol + 2 + size + 2 > in.size()) return out;
    out.append(in, eol + 2, size);
    pos = eol + 2 + size + 2;
  }
  return out;
}

inline raw_response raw_exchange(int port, const std::string& request, const raw_options& o = {}) {
  namespace asio = boost::asio;
  raw_response out;
  asio::io_context ioc;
  asio::ip::tcp::socket sock(ioc);
  boost::system::error_code ec;
  sock.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
  if (ec) return out;
  timeval tv{o.timeout_s, 0};
  setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(sock.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  asio::write(sock, asio::buffer(request), ec);
  if (ec) return out;
  std::string raw;
  char buf[512];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    const size_t n = sock.read_some(asio::buffer(buf), ec);
    raw.append(buf, n);
    if (ec == asio::error::eof) {
      out.complete = true;
      break;
    }
    if (ec) break;
    if (o.disconnect_after >= 0 && static_cast<int64_t>(raw.size()) >= o.disconnect_after) break;
    if (o.slow_read_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.slow_read_ms));
  }
  sock.close(ec);
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) == 0 && raw.size() >= 12) out.status = std::stoi(raw.substr(9, 3));
  if (head_end == std::string::npos) return out;
  out.headers = raw.substr(0, head_end);
  std::string body = raw.substr(head_end + 4);
  std::string lower = out.headers;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    bool ok = false;
    std::string decoded = dechunk(body, ok);
    out.complete = out.complete && ok;
    body = std::move(decoded);
  }
  out.body = std::move(body);
  return out;
}

}  // namespace troupe::testing
