#!/usr/bin/env python3
"""Prints, for each Unicode property the tokenizer's regex translation
patches, its code point ranges as Oniguruma knows them, one line each:
NAME PCRE2_PATTERN RANGE...   (RANGE = hex-hex).

Input: Oniguruma's src/unicode_property_data.c of the version `tokenizers`
bundles (onig_sys 69.9.3 -> Oniguruma 6.9.10, Unicode 16.0).
Usage: extract_oniguruma_ranges.py unicode_property_data.c > ranges.txt
Then: unicode_extras_diff < ranges.txt > ../oniguruma_unicode_extras.inc
"""
import re
import sys

CATEGORIES = ("L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po "
              "S Sm Sc Sk So Z Zs Zl Zp Cc Cf").split()
SCRIPTS = ("Han Hiragana Katakana Hangul Latin Greek Cyrillic Arabic Hebrew Thai "
           "Devanagari").split()
ALIASES = {"Nd": "Digit", "Cc": "Cntrl"}

src = open(sys.argv[1]).read()
entries = [(c, r"\p{%s}" % c) for c in CATEGORIES] + [(s, r"\p{sc:%s}" % s) for s in SCRIPTS]
entries.append(("Word", r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]"))
for name, pattern in entries:
    table = ALIASES.get(name, name)
    m = re.search(r"^CR_%s\[\] = \{ (\d+),\n(.*?)\};" % table, src, re.M | re.S)
    nums = [int(x, 16) for x in re.findall(r"0x([0-9a-fA-F]+)", m.group(2))]
    assert len(nums) == 2 * int(m.group(1)), name
    ranges = " ".join("%x-%x" % (nums[i], nums[i + 1]) for i in range(0, len(nums), 2))
    print(name, pattern, ranges)
