// stop_checker: finds stop strings in streamed text, across delta
// boundaries, and decides what text may be released. Text that could still
// be the start of a stop string is held back; once a stop string appears the
// output ends just before it (or after it with include_stop_str_in_output),
// so a stop string never reaches the client unless asked for.
//
// Plain class, one thread (the request actor's).
#pragma once

#include <string>
#include <vector>

namespace troupe {

class stop_checker {
 public:
  stop_checker(std::vector<std::string> stops, bool include_stop_str_in_output);

  // Feeds a delta; returns the text that may be released now. After a stop
  // string is found, stopped() is true and later calls return "".
  std::string feed(const std::string& delta);
  // At the end of the request: the held-back text (no stop string was found).
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  size_t held_back_length() const;

  std::vector<std::string> stops_;
  bool include_stop_;
  std::string pending_;  // not yet released
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace troupe
