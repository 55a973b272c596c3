// tokenizer_bench DIR CORPUS [REPETITIONS]: single-threaded encode
// throughput of the tokenizer in DIR over the whole CORPUS file as one text
// (add_special_tokens=false), best of REPETITIONS runs. A benchmark, not a
// test: it asserts nothing.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "model/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER_DIR CORPUS_FILE [REPETITIONS]\n");
    return 2;
  }
  const int repetitions = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  const auto load_start = std::chrono::steady_clock::now();
  auto tok = troupe::tokenizer::load(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "load: %s\n", tok.error_message().c_str());
    return 1;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  auto text = troupe::read_text_file(argv[2]);
  if (!text.ok()) {
    std::fprintf(stderr, "corpus: %s\n", text.error_message().c_str());
    return 1;
  }
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = (*tok)->encode(*text, false);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s);
    tokens = ids.size();
  }
  std::printf("load: %.3f s\n", load_s);
  std::printf("encode: %.2f MB/s (%zu bytes, %zu tokens, best of %d)\n",
              static_cast<double>(text->size()) / 1e6 / best, text->size(), tokens, repetitions);
  return 0;
}
