# The libraries the tokenizer sources link: PCRE2 (TROUPE_PCRE2) and
# utf8proc (UTF8PROC_LIBRARY). Included by model/tokenizer/CMakeLists.txt
# and by the fuzz project (tests/fuzz), which compiles the same sources.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
endif()
if(PCRE2_FOUND)
  set(TROUPE_PCRE2 PkgConfig::PCRE2)
else()
  find_library(TROUPE_PCRE2 NAMES pcre2-8 REQUIRED)
endif()
find_library(UTF8PROC_LIBRARY NAMES utf8proc REQUIRED)
