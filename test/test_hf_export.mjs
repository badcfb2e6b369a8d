#!/usr/bin/env node
/*
 * test/test_hf_export.mjs — an exported model (scripts/export_hf) checked by an independent runtime:
 * transformers.js (npm @huggingface/transformers, onnxruntime in node), loading the folder from disk only.
 * For each model and prompt:
 *   - its tokenizer gives the prompt the same ids as `./tokenize ids` (our llmc/bpe.h);
 *   - its logits for <|endoftext|> + prompt equal our C forward pass's (build/hf_reference, fp32) within 1e-3;
 *   - its greedy generation of 32 tokens equals ours token for token (the sampler at --top-k 1 over our
 *     forward), every step after the first fed one token and the KV cache (the ONNX graph's
 *     past_key_values), each step's logits within 1e-3 of ours for that context;
 *   - `./train_gpt2 -x 0 --top-k 1` prints those tokens, and transformers.js decodes them to the same text.
 * Without arguments it checks the three fixtures the Makefile exports into build/hf/ (random-init models at
 * GPT-2's vocabulary and at a learned one, whose greedy text repeats one token, and a model trained 400
 * steps at the learned one); `test/test_hf_export.mjs MODEL VOCAB_DIR EXPORT_DIR [PROMPT]` checks one model.
 * Prints one line per check with the measured numbers; exits 1 if any fails.
 */
import { env, AutoTokenizer, AutoModelForCausalLM, Tensor } from "@huggingface/transformers";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const LOGIT_TOL = 1e-3;
const NEW_TOKENS = 32;
const PROMPT = 'And God said, "Let there be light": and there was light. Émma\'s 1,200 pounds!';
const CASES = process.argv.length > 2
    ? [{ model: process.argv[2], vocab: process.argv[3], dir: process.argv[4], prompt: process.argv[5] ?? PROMPT }]
    : [{ model: "build/hf/init_gpt2.bin", vocab: "data/gpt2", dir: "build/hf/init_gpt2_hf", prompt: PROMPT },
       { model: "build/hf/init_small.bin", vocab: "data/small4096/vocab", dir: "build/hf/init_small_hf", prompt: PROMPT },
       { model: "build/hf/trained/model_00000400.bin", vocab: "data/small4096/vocab", dir: "build/hf/trained_hf", prompt: "And God said" }];

env.allowRemoteModels = false;  // local files only: nothing from the hub
let failed = 0;
const check = (ok, what) => { console.log(`${ok ? "ok" : "FAIL"}: ${what}`); if (!ok) { failed = 1; } };

// GPT-2's byte <-> printable character map (encoder.py's bytes_to_unicode), to get a token's bytes
function unicodeToBytes() {
    const bs = [];
    for (let b = 33; b <= 126; b++) { bs.push(b); }
    for (let b = 161; b <= 172; b++) { bs.push(b); }
    for (let b = 174; b <= 255; b++) { bs.push(b); }
    const cs = [...bs];
    let n = 0;
    for (let b = 0; b < 256; b++) { if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; } }
    return new Map(cs.map((c, i) => [String.fromCodePoint(c), bs[i]]));
}
const U2B = unicodeToBytes();

// what llmc/tokenizer.h's tokenizer_print writes for a token: printable bytes, whitespace and bytes >= 0x80
// as they are, others as \xNN, the bytes after a NUL dropped (a C string); <|endoftext|> as itself
function trainerPrint(tokenStr, isEot) {
    if (isEot) { return Buffer.from(tokenStr); }
    const out = [];
    for (const ch of tokenStr) {
        const b = U2B.get(ch);
        if (b === 0) { break; }
        const printable = (b >= 0x20 && b < 0x7f) || (b >= 9 && b <= 13) || b >= 0x80;
        if (printable) { out.push(b); } else { out.push(...Buffer.from("\\x" + b.toString(16).padStart(2, "0"))); }
    }
    return Buffer.from(out);
}

for (const c of CASES) {
    const name = `${c.dir} (${c.vocab})`;
    const gpt2Vocab = path.resolve(c.vocab) === path.resolve("data/gpt2");
    // ours: ids, logits and greedy tokens from the C forward pass, the ids also from ./tokenize
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "test_hf_export_"));
    const logitsPath = path.join(tmp, "logits.bin");
    const ref = JSON.parse(execFileSync("build/hf_reference", [c.model, c.vocab, c.prompt, String(NEW_TOKENS), logitsPath]));
    const ours = new Float32Array(fs.readFileSync(logitsPath).buffer.slice(0));
    const tokIds = execFileSync("./tokenize", ["--vocab", c.vocab, "ids"], { input: c.prompt }).toString().trim().split(/\s+/).map(Number);
    const trainerArgs = ["-e", c.model, "-x", "0", "--prompt", c.prompt, "-g", String(NEW_TOKENS), "--top-k", "1", "--precision", "fp32"];
    if (!gpt2Vocab) { trainerArgs.push("--vocab", c.vocab); }
    const trainerOut = execFileSync("./train_gpt2", trainerArgs, { env: { ...process.env, OMP_NUM_THREADS: "2" }, maxBuffer: 1 << 26 });
    fs.rmSync(tmp, { recursive: true });

    // theirs: the exported folder through transformers.js
    env.localModelPath = path.dirname(path.resolve(c.dir)) + "/";
    const id = path.basename(c.dir);
    const tokenizer = await AutoTokenizer.from_pretrained(id, { local_files_only: true });
    const model = await AutoModelForCausalLM.from_pretrained(id, { dtype: "fp32", local_files_only: true });

    const theirIds = tokenizer.encode(c.prompt, { add_special_tokens: false });
    check(JSON.stringify(theirIds) === JSON.stringify(tokIds) && JSON.stringify([ref.ids[0], ...tokIds]) === JSON.stringify(ref.ids),
          `${name}: the prompt's ${tokIds.length} ids equal ./tokenize ids (${tokIds.slice(0, 8).join(" ")} ...)`);

    const T = ref.ids.length, V = ref.V;
    const maxDiff = (a, row) => {  // max |a - ours[row]| and max |ours[row]| over a row of V logits
        let d = 0, m = 0;
        for (let i = 0; i < V; i++) { d = Math.max(d, Math.abs(a[i] - ours[row * V + i])); m = Math.max(m, Math.abs(ours[row * V + i])); }
        return [d, m];
    };
    const input_ids = new Tensor("int64", BigInt64Array.from(ref.ids.map(BigInt)), [1, T]);
    const attention_mask = new Tensor("int64", new BigInt64Array(T).fill(1n), [1, T]);
    const { logits } = await model({ input_ids, attention_mask });
    const dimsOk = logits.dims.join(",") === `1,${T},${V}`;
    let promptDiff = 0, maxAbs = 0;
    for (let t = 0; dimsOk && t < T; t++) {
        const [d, m] = maxDiff(logits.data.subarray(t * V, (t + 1) * V), t);
        promptDiff = Math.max(promptDiff, d);
        maxAbs = Math.max(maxAbs, m);
    }
    check(dimsOk && promptDiff <= LOGIT_TOL,
          `${name}: logits (${logits.dims.join("x")}) within ${LOGIT_TOL} of our C forward: max |diff| ${promptDiff.toExponential(2)} (max |logit| ${maxAbs.toFixed(2)})`);

    // greedy; our sampler never stops at <|endoftext|>, so neither does this. Every step's forward is
    // watched: after the first, it must get one new token and the cache, and its logits must be ours.
    const steps = [];
    const forward = model.forward.bind(model);
    model.forward = async (inputs) => {
        const o = await forward(inputs);
        const n = inputs.input_ids.dims[1];
        steps.push({ n, cached: Object.keys(inputs).some((k) => k.startsWith("past_key_values")) && steps.length > 0,
                     last: o.logits.data.slice((n - 1) * V, n * V) });
        return o;
    };
    const gen = await model.generate({ inputs: input_ids, attention_mask, max_new_tokens: NEW_TOKENS, do_sample: false, eos_token_id: null });
    model.forward = forward;
    const theirs = gen.tolist()[0].slice(T).map(Number);
    let agree = 0;
    while (agree < NEW_TOKENS && theirs[agree] === ref.greedy[agree]) { agree++; }
    check(agree === NEW_TOKENS && theirs.length === NEW_TOKENS,
          `${name}: greedy ${NEW_TOKENS} tokens equal ours token for token (${agree}/${NEW_TOKENS} agree; ${theirs.slice(0, 8).join(" ")} ...)`);
    let stepDiff = 0;
    steps.forEach((st, k) => { stepDiff = Math.max(stepDiff, maxDiff(st.last, T - 1 + k)[0]); });
    const incremental = steps.length === NEW_TOKENS && steps.slice(1).every((st) => st.n === 1 && st.cached);
    check(incremental && stepDiff <= LOGIT_TOL,
          `${name}: the ${steps.length} generation steps ran on the KV cache (one new token each after the first: ${incremental}) ` +
          `with logits within ${LOGIT_TOL} of ours: max |diff| ${stepDiff.toExponential(2)}`);

    // the text: ./train_gpt2 prints the prompt and the continuation between '---' lines, as tokenizer_print does;
    // transformers.js decodes the same ids to the same bytes (as UTF-8 text)
    const idToToken = new Map(Object.entries(JSON.parse(fs.readFileSync(path.join(c.dir, "vocab.json")))).map(([t, i]) => [i, t]));
    const all = [...ref.ids.slice(1), ...ref.greedy];
    const expected = Buffer.concat(all.map((i) => trainerPrint(idToToken.get(i), i === V - 1)));
    const out = trainerOut.toString("latin1");
    const start = out.indexOf("generating:\n---\n") + "generating:\n---\n".length;
    const printed = Buffer.from(out.slice(start, out.indexOf("\n---", start)), "latin1");
    check(printed.equals(expected), `${name}: ./train_gpt2 --top-k 1 prints the same ${NEW_TOKENS} tokens (${printed.length} bytes)`);
    const bytes = Buffer.concat(all.map((i) => (i === V - 1 ? Buffer.from("<|endoftext|>") : Buffer.from([...idToToken.get(i)].map((ch) => U2B.get(ch))))));
    const decoded = tokenizer.decode(all, { skip_special_tokens: false });
    check(decoded === new TextDecoder().decode(bytes), `${name}: transformers.js decodes them to the same text: ${JSON.stringify(decoded.slice(c.prompt.length, c.prompt.length + 60))}...`);
}
process.exit(failed);
