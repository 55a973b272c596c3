#include "model/tokenizer/unicode_normalize.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "model/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

constexpr char32_t kMaxCodePoint = 0x110000;

// Code points that can change under NFC or change their neighbours: those
// with a combining class, those whose NFC differs from themselves, and those
// that can be the second part of a canonical composition.
class nfc_unstable_set {
 public:
  nfc_unstable_set() : bits_(kMaxCodePoint / 64) {
    for (char32_t cp = 0x80; cp < kMaxCodePoint; ++cp) classify(cp);
    for (char32_t cp = 0x1161; cp <= 0x1175; ++cp) mark(cp);  // Hangul vowel jamo
    for (char32_t cp = 0x11A8; cp <= 0x11C2; ++cp) mark(cp);  // Hangul trailing jamo
  }
  bool contains(char32_t cp) const { return (bits_[cp >> 6] >> (cp & 63)) & 1; }

 private:
  void mark(char32_t cp) { bits_[cp >> 6] |= uint64_t{1} << (cp & 63); }

  void classify(char32_t cp) {
    const auto c = static_cast<utf8proc_int32_t>(cp);
    const utf8proc_property_t* p = utf8proc_get_property(c);
    if (p->combining_class != 0) mark(cp);
    if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0) return;
    utf8proc_int32_t parts[8];
    int last = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(c, parts, 8, UTF8PROC_DECOMPOSE, &last);
    for (utf8proc_ssize_t k = 1; k < n && k < 8; ++k) mark(static_cast<char32_t>(parts[k]));
    std::string one;
    utf8_append(one, cp);
    utf8proc_uint8_t* composed = nullptr;
    utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(one.data()),
                 static_cast<utf8proc_ssize_t>(one.size()), &composed,
                 static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (composed == nullptr || one != reinterpret_cast<const char*>(composed)) mark(cp);
    std::free(composed);
  }

  std::vector<uint64_t> bits_;
};

bool is_ascii(const std::string& text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

bool nfc_quick_check(const std::string& text) {
  static const nfc_unstable_set unstable;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp = 0;
    i += utf8_decode(text, i, cp);
    if (unstable.contains(cp)) return false;
  }
  return true;
}

utf8proc_option_t options_of(unicode_form form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case unicode_form::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case unicode_form::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case unicode_form::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case unicode_form::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  return static_cast<utf8proc_option_t>(options);
}

}  // namespace

void unicode_normalize(unicode_form form, std::string& text) {
  if (is_ascii(text)) return;
  if (form == unicode_form::nfc && nfc_quick_check(text)) return;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &mapped, options_of(form));
  if (n >= 0 && mapped != nullptr) text.assign(reinterpret_cast<const char*>(mapped), n);
  std::free(mapped);
}

}  // namespace troupe::tok
