#include "model/tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "model/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

struct byte_level_tables {
  std::array<std::string, 256> char_of_byte;
  std::array<int16_t, 0x200> byte_of_char;  // -1 where the code point is unmapped

  byte_level_tables() {
    byte_of_char.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      utf8_append(char_of_byte[b], cp);
      byte_of_char[cp] = static_cast<int16_t>(b);
    }
  }
};

const byte_level_tables& tables() {
  static const byte_level_tables t;
  return t;
}

}  // namespace

std::string_view byte_level_char(unsigned char b) { return tables().char_of_byte[b]; }

void byte_level_encode(std::string_view bytes, std::string& out) {
  const auto& t = tables();
  for (const char c : bytes) out.append(t.char_of_byte[static_cast<unsigned char>(c)]);
}

bool byte_level_decode(std::string_view token, std::string& out) {
  const auto& t = tables();
  const size_t mark = out.size();
  for (size_t i = 0; i < token.size();) {
    char32_t cp = 0;
    i += utf8_decode(token, i, cp);
    if (cp >= t.byte_of_char.size() || t.byte_of_char[cp] < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(static_cast<char>(t.byte_of_char[cp]));
  }
  return true;
}

}  // namespace troupe::tok
