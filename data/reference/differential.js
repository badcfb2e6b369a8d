// Differential test of ./tokenize against the reference on random text: code points drawn from a pool of
// tricky classes (combining marks, ZWJ, Unicode spaces and numbers, emoji, CJK, contractions,
// astral letters and digits) with invalid UTF-8 bytes sprinkled in. Prints IDENTICAL or DIFFERENT.
// usage (repository root): node data/reference/differential.js PKG_DIR [num_code_points] [seed]
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { load_package, make_encoder } = require('./gpt2_reference.js');

const [pkg_dir, n_s = '200000', seed_s = '99'] = process.argv.slice(2);
if (!pkg_dir) { console.error('usage: differential.js PKG_DIR [num_code_points] [seed]'); process.exit(1); }
const encode_bytes = make_encoder(load_package(pkg_dir));
const pool = Array.from("aZ\u00e9e\u0301\u0300\u200d\u200b\u00ad'sltmdrev 1\u0663\u2167\u00bd\t\n\r\u000b\u000c" +
  "\u00a0\u2003\u3000\u2028\u0085\ufeff\u1680\u4e2d\u6587\u65e5\ud55c!?.,-_\"'\u{1F600}\u{1F469}\u200d\u{1F4BB}" +
  "\u{1F1EB}\u{1F1F7}\u{1F3FB}\u{10000}\u{E0001}\u{1D7D8}\u00df\u0130\u0131\u01c5\u1fbc\u0e01\u0e31\u216b\u2460" +
  "\u{1F100}\u00b2\u0600\u0610\u202e");
let state = parseInt(seed_s, 10);
const rnd = k => { state = (state * 1103515245 + 12345) % 2147483648; return Math.floor(state / 65536) % k; };
let text = '';
for (let i = 0; i < parseInt(n_s, 10); i++) text += pool[rnd(pool.length)];
const bytes = Array.from(Buffer.from(text, 'utf-8'));
for (let i = 0, k = bytes.length / 200; i < k; i++) bytes.splice(rnd(bytes.length), 0, 0x80 + rnd(128));
const input = Buffer.from(bytes);
const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'bpe_diff_')), 'input.bin');
fs.writeFileSync(file, input);
const ref = encode_bytes(input).join(' ');
const ours = execFileSync('./tokenize', ['ids', file], { maxBuffer: 1 << 28 }).toString().trim();
fs.rmSync(path.dirname(file), { recursive: true });
console.log(`${input.length} bytes, reference ${ref.split(' ').length} ids, ours ${ours.split(' ').length} ids: ` +
  (ref === ours ? 'IDENTICAL' : 'DIFFERENT'));
process.exit(ref === ours ? 0 : 1);
