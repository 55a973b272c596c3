// unicode_normalize: NFC/NFD/NFKC/NFKD through utf8proc, with a quick check
// that leaves text already in NFC untouched without calling utf8proc (most
// text, including CJK, is). The quick-check table is built once per process
// on first use; everything else is stateless and thread-safe.
#pragma once

#include <string>

namespace troupe::tok {

enum class unicode_form { nfc, nfd, nfkc, nfkd };

// Normalizes valid UTF-8 in place.
void unicode_normalize(unicode_form form, std::string& text);

}  // namespace troupe::tok
