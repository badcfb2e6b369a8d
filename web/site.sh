#!/usr/bin/env bash
# web/site.sh SITE MODEL.bin [VOCAB_DIR] — assembles the static site of web/ into SITE: the page (index.html,
# app.js), transformers.js and onnxruntime-web's WebAssembly in SITE/lib (links into node_modules: npm ci
# first, as `make web` does), and MODEL exported by scripts/export_hf into SITE/models/model (VOCAB_DIR: the
# model's vocabulary, default GPT-2's). Any static server serves SITE; `make web` uses Python's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "usage: web/site.sh SITE MODEL.bin [VOCAB_DIR]" >&2; exit 1; }
site=$1 model=$2 vocab=${3:-$ROOT/data/gpt2}
tjs=$ROOT/node_modules/@huggingface/transformers/dist
ort=$ROOT/node_modules/onnxruntime-web/dist
[ -f "$tjs/transformers.min.js" ] && [ -f "$ort/ort-wasm-simd-threaded.asyncify.wasm" ] \
    || { echo "error: $ROOT/node_modules: no transformers.js or onnxruntime-web (run npm ci, or make web)" >&2; exit 1; }
[ -f "$model" ] || { echo "error: $model: no such model file" >&2; exit 1; }
# a SITE this run creates goes again if a step fails: never a half-built site
[ -e "$site" ] || trap 'rm -rf "$site"' ERR
mkdir -p "$site/lib" "$site/models"
cp "$ROOT/web/index.html" "$ROOT/web/app.js" "$site/"
ln -sf "$tjs/transformers.min.js" "$site/lib/"
ln -sf "$ort/ort-wasm-simd-threaded.asyncify.mjs" "$ort/ort-wasm-simd-threaded.asyncify.wasm" "$site/lib/"
"$ROOT/scripts/export_hf" "$model" "$site/models/model" --vocab "$vocab"
