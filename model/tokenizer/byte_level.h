// byte_level: GPT-2's reversible map from the 256 byte values to printable
// code points ('!'..'~', '¡'..'¬', '®'..'ÿ' map to themselves; the others to
// U+0100 upwards in byte order), used by the ByteLevel pre-tokenizer and
// decoder. Tables are built once (function-local statics) and read-only.
#pragma once

#include <string>
#include <string_view>

namespace troupe::tok {

// The mapped character of byte b, as UTF-8 (1 or 2 bytes).
std::string_view byte_level_char(unsigned char b);

// Appends the mapped characters of every byte of `bytes`.
void byte_level_encode(std::string_view bytes, std::string& out);

// Appends the bytes of `token` if every character of it is a mapped
// character and returns true; otherwise appends nothing and returns false.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace troupe::tok
