// Regenerates tests/model/tokenizer/data/<name>.json: adversarial encode and
// decode cases with their ids from Hugging Face `tokenizers` (the npm
// package `tokenizers`, the same Rust core as the Python one).
//   cd /tmp/x && npm install tokenizers@0.23.2
//   NODE_PATH=/tmp/x/node_modules node tests/model/tokenizer/make_adversarial.js
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const path = require('path');
const { version } = require('tokenizers/package.json');

const root = path.resolve(__dirname, '../../..');
const names = ['qwen3', 'llama3_1', 'llama2', 'deepseek_v3'];

let seed = 12345;
function rand() {  // xorshift32, deterministic
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const range = (lo, hi) => String.fromCodePoint(lo + Math.floor(rand() * (hi - lo + 1)));

const pools = [
  () => pick([' ', '  ', '\t', '\n', '\r\n', '\r', '\u00a0', '\u0085', '\u2028', '\u3000', '\u200b', '\u2009', '\f', '\v', '\u001c']),
  () => range(0x21, 0x7e), () => range(0x61, 0x7a), () => range(0x41, 0x5a), () => range(0x30, 0x39),
  () => pick(["'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'D", "'ſ", "\u2019s", "n't"]),
  () => range(0xc0, 0x24f), () => range(0x370, 0x3ff), () => range(0x400, 0x4ff), () => range(0x590, 0x6ff),
  () => range(0x900, 0x97f), () => range(0xe00, 0xe7f), () => range(0x300, 0x36f), () => range(0x4e00, 0x9fff),
  () => range(0x3040, 0x30ff), () => range(0xac00, 0xd7a3), () => range(0x1100, 0x11ff), () => range(0xff00, 0xffef),
  () => range(0x1f300, 0x1faff), () => pick(['\u200d', '\ufe0f', '\u{1f3fb}', '\u{1f1e8}\u{1f1f3}']),
  () => range(0x20000, 0x2a6df), () => range(0x2000, 0x2bff), () => range(0xe000, 0xe0ff),
  () => range(0x1d400, 0x1d7ff), () => range(0x1cc00, 0x1ceff), () => range(0x10d40, 0x10d8f),
  () => range(0x11380, 0x113ff), () => range(0x31350, 0x323af), () => range(0x2420, 0x242f),
  () => range(0x1fa00, 0x1faff), () => range(0x0, 0x2f), () => range(0x80, 0xbf), () => pick(['\u0660\u0661', '\u0966', '\uff11\uff12', '\u00b2', '\u2163', '\u2155']),
  () => pick(['e\u0301', '\u00e9', 'A\u030a', '\u212b', '\u1e9b\u0323', '\u0041\u0308\u0304', 'ﬁ', '\u2126', '\u0b47\u0b3e', '\u1100\u1161\u11a8']),
  () => pick(['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<|begin_of_text|>', '<|eot_id|>', '<s>', '</s>', '<unk>',
              '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<think>', '</think>', '<tool_call>', '<|im_start', '|im_end|>',
              '<|reserved_special_token_5|>', '<｜tool▁calls▁begin｜>', '▁', '▁▁', '<0x41>', 'Ġ']),
  () => pick(['http://x.io/a?b=1&c=2', 'foo_bar.baz()', '0x1F', '1,234,567.89', '3.14e-10', '#include <vector>', '{"a": [1, 2]}', '    ', '\n\n\n', '...', '!!!???', '---', '=>', '&&', 'über', 'DON\'T', 'I\'M']),
];

function random_text() {
  const n = 1 + Math.floor(rand() * 24);
  let s = '';
  for (let i = 0; i < n; ++i) s += pick(pools)();
  return s;
}

function fixed_texts() {
  return ['', ' ', 'a', '\n', ' \n ', 'a'.repeat(1000), ' '.repeat(300) + 'x', '\n'.repeat(50), '9'.repeat(100),
    'ab'.repeat(400), '\u00e9'.repeat(300), '\u4e2d'.repeat(500), '😀'.repeat(100), 'x y'.repeat(200) + '  ',
    'Hello <|im_start|> world<|im_end|>\n', '<|im_start|><|im_start|>', '<s><s> </s>', ' <s> hi', 'hi <s>',
    '<|begin_of_text|><|begin_of_text|>', '<｜begin▁of▁sentence｜>Hi<｜end▁of▁sentence｜>', 'a\u0085b\u00a0c\u2028d',
    'tab\tend\t', 'trailing space ', '  leading', '\r\n\r\n', 'x\r\ny', '1234567', '١٢٣٤', 'ＡＢＣ１２３', 'ǅungla ǈ',
    'İstanbul ı', 'Straße STRASSE', '\u1e9b\u0323', 'e\u0301\u0301', '\u0f73\u0f75', '가각\u1100\u1161', 'A\u030a\u212b'];
}

function main() {
  const texts = fixed_texts();
  for (let i = 0; i < 400; ++i) texts.push(random_text());
  for (const name of names) {
    const dir = path.join(root, 'tests/data/tokenizers', name);
    const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
    const out = { reference: `tokenizers ${version} (npm)`, cases: [], special_cases: [], decode_cases: [] };
    const vocab = tok.getVocabSize(true);
    (async () => {
      for (const text of texts) {
        const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
        out.cases.push({ text, ids, decoded: await tok.decode(ids, false),
                         decoded_skip: await tok.decode(ids, true) });
      }
      for (const text of texts.slice(0, 60)) {
        out.special_cases.push({ text, ids: (await tok.encode(text, null, { addSpecialTokens: true })).getIds() });
      }
      for (let i = 0; i < 200; ++i) {
        const ids = [];
        const n = 1 + Math.floor(rand() * 12);
        for (let k = 0; k < n; ++k) ids.push(rand() < 0.15 ? vocab - 1 - Math.floor(rand() * 300) : Math.floor(rand() * vocab));
        const skip = rand() < 0.5;
        out.decode_cases.push({ ids, skip_special_tokens: skip, decoded: await tok.decode(ids, skip) });
      }
      fs.writeFileSync(path.join(__dirname, 'data', `${name}.json`), JSON.stringify(out));
      console.log(name, out.cases.length, out.special_cases.length, out.decode_cases.length);
    })();
  }
}
main();
