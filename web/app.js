// web/app.js — the page's logic: load the exported model from models/model/ (no hub, no CDN: transformers.js and
// onnxruntime-web's WebAssembly come from lib/), then on Generate write the prompt and its continuation.
// Like the trainer's sampler, the context starts with <|endoftext|> before the prompt; greedy generation
// gives the text `./train_gpt2 -x 0 --top-k 1` prints. document.body.dataset.state says where it is
// ("loading", "ready", "generating", "done", "error"), for the Chromium test.
import { env, AutoTokenizer, AutoModelForCausalLM, Tensor, TextStreamer } from "./lib/transformers.min.js";

env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = "models/";  // relative to the page
env.useBrowserCache = false;
env.backends.onnx.wasm.wasmPaths = {
    mjs: new URL("lib/ort-wasm-simd-threaded.asyncify.mjs", location.href).href,
    wasm: new URL("lib/ort-wasm-simd-threaded.asyncify.wasm", location.href).href,
};

const $ = (id) => document.getElementById(id);
const state = (s, text) => { document.body.dataset.state = s; $("status").textContent = text; };

async function main() {
    state("loading", "loading the model…");
    const tokenizer = await AutoTokenizer.from_pretrained("model");
    const model = await AutoModelForCausalLM.from_pretrained("model", { dtype: "fp32", device: "wasm" });
    const c = model.config;
    $("model").textContent = `GPT-2: ${c.n_layer} layers, ${c.n_head} heads, ${c.n_embd} channels, ` +
        `${c.vocab_size} tokens, ${c.n_positions} positions`;
    const eot = c.eos_token_id;
    $("generate").disabled = false;
    state("ready", "ready");

    $("generate").addEventListener("click", async () => {
        $("generate").disabled = true;
        const prompt = $("prompt").value;
        const n = Math.max(1, Math.min(1000, parseInt($("tokens").value, 10) || 64));
        const ids = [eot, ...tokenizer.encode(prompt, { add_special_tokens: false })];
        if (ids.length + n > c.n_positions) {
            state("error", `prompt (${ids.length} tokens) and ${n} new tokens exceed the model's ${c.n_positions} positions`);
            $("generate").disabled = false;
            return;
        }
        const input_ids = new Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
        const attention_mask = new Tensor("int64", new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
        $("output").textContent = prompt;
        state("generating", "generating…");
        const t0 = performance.now();
        let count = 0;
        const streamer = new TextStreamer(tokenizer, {
            skip_prompt: true, skip_special_tokens: false,
            callback_function: (text) => { $("output").textContent += text; },
            token_callback_function: () => { count++; },
        });
        try {
            const greedy = $("greedy").checked;
            const out = await model.generate({ inputs: input_ids, attention_mask, max_new_tokens: n, do_sample: !greedy,
                                               eos_token_id: null, streamer });
            // the final text from all ids at once (the streamer holds back bytes of an unfinished character)
            const all = out.tolist()[0].slice(1).map(Number);
            $("output").textContent = tokenizer.decode(all, { skip_special_tokens: false });
            const s = (performance.now() - t0) / 1000;
            state("done", `${n} tokens in ${s.toFixed(2)} s (${(n / s).toFixed(1)} tokens/s)`);
        } catch (e) {
            state("error", `error: ${e.message}`);
        }
        $("generate").disabled = false;
    });
}

main().catch((e) => state("error", `error: ${e.message}`));
