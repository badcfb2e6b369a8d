// Independent GPT-2 reference for the C tokenizer: the npm package gpt-3-encoder (MIT; OpenAI's
// encoder.py ported to JavaScript), run by node. Used ONCE to produce committed fixtures; see data/README.md.
//
//   npm pack gpt-3-encoder && tar xzf gpt-3-encoder-*.tgz          # -> ./package
//   node data/reference/gpt2_reference.js PKG fixtures > test/fixtures/tokenizer_cases.tsv
//   node data/reference/gpt2_reference.js PKG shards OUTDIR VAL_EVERY SEP FILE...   # like `tokenize encode`
//
// The package's encode() takes a JS string, so it cannot see invalid UTF-8. For byte strings we decode
// strictly and map each invalid byte b to the private-use code point U+10FF00+b (class "other" for the
// pattern, like the C tokenizer treats invalid bytes), then map it back to the byte before the byte-level
// BPE. For valid UTF-8 this path is checked against the package's own encode() on every call.
'use strict';
const fs = require('fs');
const path = require('path');
const Module = require('module');

function load_package(dir) {
  const file = path.join(dir, 'Encoder.js');
  const src = fs.readFileSync(file, 'utf-8') +
    '\nmodule.exports.internals = { bpe, byte_encoder, encoder, pat };\n';
  const m = new Module(file, module);
  m.filename = file;
  m.paths = Module._nodeModulePaths(dir);
  m._compile(src, file);
  return m.exports;
}

const INVALID_BASE = 0x10ff00;

// strict UTF-8 (WHATWG ranges); each byte that does not start a valid sequence is invalid on its own
function decode_bytes(buf) {
  let s = '';
  let i = 0;
  const cont = (k, lo, hi) => i + k < buf.length && buf[i + k] >= lo && buf[i + k] <= hi;
  while (i < buf.length) {
    const b = buf[i];
    let n = 0, cp = 0;
    if (b < 0x80) { n = 1; cp = b; }
    else if (b >= 0xc2 && b <= 0xdf && cont(1, 0x80, 0xbf)) { n = 2; cp = b & 0x1f; }
    else if (b >= 0xe0 && b <= 0xef &&
             cont(1, b === 0xe0 ? 0xa0 : 0x80, b === 0xed ? 0x9f : 0xbf) && cont(2, 0x80, 0xbf)) { n = 3; cp = b & 0x0f; }
    else if (b >= 0xf0 && b <= 0xf4 &&
             cont(1, b === 0xf0 ? 0x90 : 0x80, b === 0xf4 ? 0x8f : 0xbf) && cont(2, 0x80, 0xbf) &&
             cont(3, 0x80, 0xbf)) { n = 4; cp = b & 0x07; }
    if (n === 0) { s += String.fromCodePoint(INVALID_BASE + b); i += 1; continue; }
    for (let k = 1; k < n; k++) cp = (cp << 6) | (buf[i + k] & 0x3f);
    s += String.fromCodePoint(cp);
    i += n;
  }
  return s;
}

function piece_bytes(piece) {
  const out = [];
  for (const ch of piece) {
    const cp = ch.codePointAt(0);
    if (cp >= INVALID_BASE) out.push(cp - INVALID_BASE);
    else out.push(...Buffer.from(ch, 'utf-8'));
  }
  return out;
}

function make_encoder(pkg) {
  const { bpe, byte_encoder, encoder, pat } = pkg.internals;
  return function encode_bytes(buf) {
    const text = decode_bytes(buf);
    const ids = [];
    for (const m of text.matchAll(pat)) {
      const token = piece_bytes(m[0]).map(b => byte_encoder[b]).join('');
      for (const t of bpe(token).split(' ')) {
        if (encoder[t] === undefined) throw new Error(`reference produced unknown token ${JSON.stringify(t)}`);
        ids.push(encoder[t]);
      }
    }
    if (!/[\u{10ff00}-\u{10ffff}]/u.test(text)) {
      const direct = pkg.encode(text);  // the unmodified package on the same (valid) text
      if (direct.join(' ') !== ids.join(' ')) throw new Error('byte path disagrees with package encode()');
    }
    return ids;
  };
}

function lcg_string(n, alphabet) {
  const chars = Array.from(alphabet);
  let state = 12345;
  let out = '';
  for (let i = 0; i < n; i++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    out += chars[Math.floor(state / 65536) % chars.length];
  }
  return out;
}

// known-answer cases: [name, Buffer]
function cases() {
  const u = s => Buffer.from(s, 'utf-8');
  const h = x => Buffer.from(x.replace(/ /g, ''), 'hex');
  return [
    ['empty', u('')],
    ['ascii_prose', u('Hello world! The quick brown fox jumps over the lazy dog.')],
    ['sentence_with_newline', u('It is a truth universally acknowledged, that a single man\nin possession of a good fortune, must be in want of a wife.\n')],
    ['contractions', u("I'll go, don't you? We're here, they've gone, I'm fine, he'd say it's John's.")],
    ['contraction_upper', u("'S 'T 'RE 'LL IT'S DON'T")],
    ['contraction_glued', u("x'sy 'll'd''s ?'s")],
    ['digits', u('In 1984 there were 3.14159 apples and 1,000,000 pears; 42x 7b 2nd')],
    ['whitespace_runs', u('a  b   c    d\n\n\ne \t f')],
    ['trailing_spaces', u('end of line   \nnext line  ')],
    ['only_spaces', u('     ')],
    ['tabs_newlines', u('\tindented\n\t\tmore\r\nwindows\r\n\n')],
    ['leading_space_word', u(' leading and  double')],
    ['accented', u('Café naïve résumé Ångström Zürich señor façade')],
    ['cjk', u('日本語のテキスト、中文文本。한국어 텍스트')],
    ['emoji', u('I ❤️ 🦙 and 👩‍💻! 🇫🇷 ok')],
    ['mixed_scripts', u('Привет мир, γειά σου κόσμε, مرحبا بالعالم')],
    ['unicode_numbers', u('Ⅻ ½ ٣ ² ๓ 10²')],
    ['unicode_spaces', u('a\u00a0b\u2003c\u3000d\u2028e\u0085f\ufeffg')],
    ['punctuation', u('Wait... what?!? (yes) [no] {maybe} "quoted" --dash-- @user #tag $5 100% a&b')],
    ['endoftext_literal', u('<|endoftext|>')],
    ['long_word', u('Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism')],
    ['code', u('int main(void) {\n    return x->y[0] + 0x1F;\n}\n')],
    ['invalid_lone_continuation', h('61 80 62')],
    ['invalid_truncated', h('48 65 6c 6c 6f 20 e2 82 20 77 6f 72 6c 64')],
    ['invalid_overlong', h('c0 af 20 c1 81 41 e0 80 af')],
    ['invalid_surrogate', h('ed a0 80 20 ed bf bf')],
    ['invalid_high', h('f4 90 80 80 20 f5 ff fe')],
    ['invalid_after_space', h('20 ff 20 20 ff 61')],
    ['invalid_between_letters', h('ab fe cd 20 c3 a9 ff c3 a9')],
    ['all_bytes', Buffer.from(Array.from({ length: 256 }, (_, i) => i))],
    // pieces longer than the C tokenizer's cache and heap thresholds (deterministic LCG text)
    ['long_random_letters', u(lcg_string(3000, 'abcdefghijklmnopqrstuvwxyzeeeeaaattt'))],
    ['long_random_mixed', u(lcg_string(3000, 'ab c\n1 2,.;\'s\'ll  \t\u00e9\u00fc\u4e2d\u{1F999}'))],
    ['long_repeats', u('a'.repeat(500) + ' ' + 'ab'.repeat(300) + ' ' + '='.repeat(400) + ' '.repeat(300) + '1'.repeat(200))],
  ];
}

function main() {
  const [pkg_dir, mode, ...rest] = process.argv.slice(2);
  if (!pkg_dir || !mode) {
    console.error('usage: gpt2_reference.js PKG_DIR fixtures | shards OUTDIR VAL_EVERY SEP FILE...');
    process.exit(1);
  }
  const encode_bytes = make_encoder(load_package(pkg_dir));
  if (mode === 'fixtures') {
    console.log('# name\tinput bytes (hex)\tGPT-2 token ids; generated by data/reference/gpt2_reference.js (npm gpt-3-encoder)');
    for (const [name, buf] of cases()) {
      console.log(`${name}\t${buf.toString('hex')}\t${encode_bytes(buf).join(' ')}`);
    }
  } else if (mode === 'shards') {
    // same document rules as `tokenize encode --doc-sep SEP --val-every K` (one shard per split)
    const [outdir, val_every_s, sep, ...files] = rest;
    const val_every = parseInt(val_every_s, 10);
    const splits = { train: [], val: [] };
    let doc_index = 0;
    for (const file of files) {
      const buf = fs.readFileSync(file);
      const docs = [];
      let start = 0, pos = 0;
      while (pos < buf.length) {
        let end = buf.indexOf(0x0a, pos);
        const next = end < 0 ? buf.length : end + 1;
        if (end < 0) end = buf.length;
        if (buf.subarray(pos, end).toString('latin1') === Buffer.from(sep, 'utf-8').toString('latin1')) {
          docs.push(buf.subarray(start, pos));
          start = next;
        }
        pos = next;
      }
      docs.push(buf.subarray(start));
      for (const d of docs) {
        if (d.length === 0) continue;
        const ids = [50256, ...encode_bytes(d)];
        const split = val_every > 0 && doc_index % val_every === val_every - 1 ? 'val' : 'train';
        for (const t of ids) splits[split].push(t);
        doc_index++;
      }
    }
    for (const split of ['train', 'val']) {
      const toks = splits[split];
      if (toks.length === 0) continue;
      const header = Buffer.alloc(1024);
      header.writeInt32LE(20240520, 0); header.writeInt32LE(1, 4);
      header.writeInt32LE(toks.length, 8); header.writeInt32LE(50257, 12);
      const body = Buffer.alloc(2 * toks.length);
      toks.forEach((t, i) => body.writeUInt16LE(t, 2 * i));
      fs.writeFileSync(path.join(outdir, `${split}_000000.bin`), Buffer.concat([header, body]));
      console.error(`${split}: ${toks.length} tokens`);
    }
  } else {
    console.error(`unknown mode ${mode}`);
    process.exit(1);
  }
}

if (require.main === module) {
  main();
} else {
  module.exports = { load_package, make_encoder };
}
