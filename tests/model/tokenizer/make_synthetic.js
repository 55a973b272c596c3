// Regenerates tests/model/tokenizer/data/synthetic/<name>/: small tokenizers
// built from the fixtures' vocabularies to exercise components the four real
// tokenizers do not use (Metaspace, Split behaviours, NFKC/NFD, Strip and
// Replace normalizers, added-token flags, subword prefix/suffix, unk), and
// expected.json with Hugging Face `tokenizers` results for them.
//   NODE_PATH=/tmp/x/node_modules node tests/model/tokenizer/make_synthetic.js
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const path = require('path');
const { version } = require('tokenizers/package.json');

const root = path.resolve(__dirname, '../../..');
const base = (name) => JSON.parse(fs.readFileSync(path.join(root, 'tests/data/tokenizers', name, 'tokenizer.json')));

// Keeps the tokens with id < limit and the merges among them.
function shrink(tok, limit) {
  const vocab = {};
  for (const [t, id] of Object.entries(tok.model.vocab)) if (id < limit) vocab[t] = id;
  const pair = (m) => (Array.isArray(m) ? m : m.split(' '));
  tok.model.merges = tok.model.merges.filter((m) => {
    const [a, b] = pair(m);
    return Object.hasOwn(vocab, a) && Object.hasOwn(vocab, b) && Object.hasOwn(vocab, a + b);
  });
  tok.model.vocab = vocab;
  tok.added_tokens = tok.added_tokens.filter((t) => t.id < limit);
  return tok;
}
const added = (id, content, o = {}) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: false, ...o });
const ms = (scheme, split) => ({ type: 'Metaspace', replacement: '▁', prepend_scheme: scheme, split });

function variants() {
  const out = {};
  let t = shrink(base('llama2'), 1500);
  t.normalizer = null;
  t.pre_tokenizer = ms('first', false);
  t.decoder = ms('first', false);
  t.post_processor.single.push({ SpecialToken: { id: '</s>', type_id: 0 } });
  t.post_processor.special_tokens['</s>'] = { id: '</s>', ids: [2], tokens: ['</s>'] };
  t.added_tokens.push(added(1500, '<|im_start|>', { special: true }), added(1501, '<tool>', { lstrip: true, rstrip: true }),
    added(1502, 'hello', { single_word: true, normalized: true }), added(1503, 'World', { normalized: true }));
  out.metaspace_first = t;

  t = shrink(base('llama2'), 1500);
  t.normalizer = { type: 'NFKC' };
  t.pre_tokenizer = ms('always', true);
  t.decoder = ms('always', true);
  t.model.byte_fallback = false;
  t.model.fuse_unk = false;
  t.added_tokens.push(added(1500, '<sep>', { special: true, rstrip: true }), added(1501, 'ß', { normalized: true }));
  out.metaspace_always_split = t;

  t = shrink(base('llama2'), 1500);
  t.normalizer = { type: 'Sequence', normalizers: [{ type: 'Strip', strip_left: true, strip_right: true },
    { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' }, { type: 'NFD' },
    { type: 'Replace', pattern: { String: ' ' }, content: '▁' }]};
  t.pre_tokenizer = ms('never', true);
  t.decoder.decoders[3] = { type: 'Strip', content: ' ', start: 0, stop: 1 };
  out.metaspace_never_strip = t;

  t = shrink(base('qwen3'), 3000);
  t.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'NFC' }] };
  t.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { String: '-' }, behavior: 'MergedWithPrevious', invert: false },
    { type: 'Split', pattern: { Regex: '\\d' }, behavior: 'Removed', invert: false },
    { type: 'Split', pattern: { Regex: '[aeiou]+' }, behavior: 'Contiguous', invert: true },
    { type: 'Split', pattern: { Regex: 'x' }, behavior: 'MergedWithNext', invert: false },
    { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }]};
  t.post_processor = { type: 'Sequence', processors: [{ type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<|im_start|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '<|im_end|>', type_id: 0 } }], pair: [], special_tokens: {
      '<|im_start|>': { id: '<|im_start|>', ids: [3000], tokens: ['<|im_start|>'] }, '<|im_end|>': { id: '<|im_end|>', ids: [3001], tokens: ['<|im_end|>'] } } }]};
  t.added_tokens = [added(3000, '<|im_start|>', { special: true }), added(3001, '<|im_end|>', { special: true }),
    added(3002, ' [MASK]', { special: true, lstrip: true }), added(3003, 'WORD', { single_word: true, normalized: true }),
    added(3004, 'the', { normalized: true })];
  out.byte_level_splits = t;

  const letters = 'abcdefghijklmnopqrstuvwxyz'.split('');
  const vocab = { '[UNK]': 0 };
  let next = 1;
  for (const c of letters) for (const v of [c, '##' + c, c + '</w>', '##' + c + '</w>']) vocab[v] = next++;
  const merges = [];
  for (const [a, b] of [['t', '##h'], ['th', '##e</w>'], ['a', '##n'], ['an', '##d</w>'], ['##i', '##n'], ['##in', '##g</w>'], ['i', '##s</w>']]) {
    vocab[a + b.slice(2)] = next++;
    merges.push([a, b]);
  }
  out.subword_prefix_suffix = { version: '1.0', truncation: null, padding: null, added_tokens: [added(0, '[UNK]', { special: true })],
    normalizer: null, pre_tokenizer: { type: 'Split', pattern: { Regex: '\\s+' }, behavior: 'Removed', invert: false },
    post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: '[UNK]', continuing_subword_prefix: '##', end_of_word_suffix: '</w>',
      fuse_unk: true, byte_fallback: false, ignore_merges: false, vocab, merges } };
  return out;
}

const texts = ['', ' ', 'Hello world', ' Hello  world ', 'hello there, helloworld, say hello!', '<|im_start|>user hi<|im_end|>',
  'a <tool> b', 'a<tool>b', '  <tool>  ', 'World World', 'Straße ﬁ ① ＡＢ', 'tabs\tand\nnew  lines', '<sep>   x <sep>',
  'café cafe\u0301', 'x-y-z 12-34 axe box', 'the [MASK] is WORD, WORDS', 'xx--aa ee', 'thing and this is',
  'unknown 123 ZZZ ümlaut', '   ', '\n', 'a  b   c', '▁hello ▁', 'the the the'];

let seed = 99;
const rand = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 4294967296; };
const words = ['hello', 'world', 'the', 'and', 'is', 'x', 'a-b', '42', '<tool>', '<sep>', '<|im_start|>', ' [MASK]', 'WORD',
  'ß', 'ﬁ', 'é', 'e\u0301', '  ', '\t', '\n', '中文', '😀', 'thing', '▁', 'aeiou', 'xyz'];
for (let i = 0; i < 120; ++i) {
  let s = '';
  for (let n = 1 + Math.floor(rand() * 10); n > 0; --n) s += words[Math.floor(rand() * words.length)] + (rand() < 0.5 ? ' ' : '');
  texts.push(s);
}

(async () => {
  for (const [name, spec] of Object.entries(variants())) {
    const dir = path.join(__dirname, 'data/synthetic', name);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(spec));
    const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
    const out = { reference: `tokenizers ${version} (npm)`, cases: [], special_cases: [] };
    for (const text of texts) {
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      // (tokenizers' Strip decoder panics on an empty token list with stop > 0.)
      const c = { text, ids };
      if (ids.length > 0) {
        c.decoded = await tok.decode(ids, false);
        const kept = ids.filter((id) => !spec.added_tokens.some((a) => a.special && a.id === id));
        if (kept.length > 0) c.decoded_skip = await tok.decode(ids, true);
      }
      out.cases.push(c);
      out.special_cases.push({ text, ids: (await tok.encode(text, null, { addSpecialTokens: true })).getIds() });
    }
    fs.writeFileSync(path.join(dir, 'expected.json'), JSON.stringify(out));
    console.log(name, out.cases.length);
  }
})();
