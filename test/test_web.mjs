#!/usr/bin/env node
/*
 * test/test_web.mjs — the page of web/ in headless Chromium (Debian's chromium, driven through its chromedriver
 * over the W3C WebDriver protocol): assembles the site with web/site.sh for a trained model, serves it on
 * localhost with Python's http.server as `make web` does, opens the page, types a prompt, asks for 32 greedy
 * tokens, waits for the text and checks that it equals what `./train_gpt2 -x 0 --top-k 1` prints for the same
 * prompt. Keeps a screenshot of the page in build/hf/web_screenshot.png.
 *     test/test_web.mjs [MODEL VOCAB_DIR]     (default: build/hf/trained/model_00000400.bin, data/small4096/vocab)
 * Exits 1 on a mismatch or if anything does not come up within its time.
 */
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";

const MODEL = process.argv[2] ?? "build/hf/trained/model_00000400.bin";
const VOCAB = process.argv[3] ?? "data/small4096/vocab";
const PROMPT = "And God said";
const NEW_TOKENS = 32;
const SITE = "build/hf/web_site";
const SHOT = "build/hf/web_screenshot.png";
const children = [];
const fail = (msg) => { console.log(`test_web: FAIL: ${msg}`); cleanup(); process.exit(1); };
const cleanup = () => { for (const c of children) { try { c.kill("SIGTERM"); } catch { /* gone */ } } };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// a port nobody listens on now
const freePort = () => new Promise((res) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => res(p)); });
});

// what the trainer prints between the '---' lines
const trainerArgs = ["-e", MODEL, "-x", "0", "--prompt", PROMPT, "-g", String(NEW_TOKENS), "--top-k", "1", "--precision", "fp32"];
if (path.resolve(VOCAB) !== path.resolve("data/gpt2")) { trainerArgs.push("--vocab", VOCAB); }
const out = execFileSync("./train_gpt2", trainerArgs, { env: { ...process.env, OMP_NUM_THREADS: "2" } }).toString();
const start = out.indexOf("generating:\n---\n") + "generating:\n---\n".length;
const expected = out.slice(start, out.indexOf("\n---", start));

fs.rmSync(SITE, { recursive: true, force: true });
execFileSync("web/site.sh", [SITE, MODEL, VOCAB], { stdio: "inherit" });

// the server, as `make web` runs it
const httpPort = await freePort();
const server = spawn("/usr/bin/python3", ["-m", "http.server", String(httpPort), "--bind", "127.0.0.1", "-d", SITE], { stdio: "ignore" });
children.push(server);
const driverPort = await freePort();
const driver = spawn("chromedriver", [`--port=${driverPort}`], { stdio: "ignore" });
children.push(driver);
process.on("exit", cleanup);

const wd = async (method, url, body) => {
    const r = await fetch(`http://127.0.0.1:${driverPort}${url}`, {
        method, headers: { "Content-Type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const j = await r.json();
    if (!r.ok) { fail(`WebDriver ${method} ${url}: ${j.value?.message ?? r.status}`); }
    return j.value;
};
for (let i = 0; ; i++) {  // chromedriver and the server up
    try {
        const ok = (await fetch(`http://127.0.0.1:${driverPort}/status`)).ok && (await fetch(`http://127.0.0.1:${httpPort}/`)).ok;
        if (ok) { break; }
    } catch { /* not yet */ }
    if (i > 100) { fail("chromedriver or the http server did not come up in 10 s"); }
    await sleep(100);
}

const caps = { capabilities: { alwaysMatch: { browserName: "chrome", "goog:chromeOptions": {
    binary: "/usr/bin/chromium", args: ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,800"] } } } };
const { sessionId } = await wd("POST", "/session", caps);
const S = `/session/${sessionId}`;
const js = (script) => wd("POST", `${S}/execute/sync`, { script, args: [] });
const el = async (css) => Object.values(await wd("POST", `${S}/element`, { using: "css selector", value: css }))[0];
const waitState = async (want, seconds) => {
    for (let t = 0; t < seconds * 10; t++) {
        const s = await js("return document.body.dataset.state || ''");
        if (s === "error") { fail(`the page says: ${await js("return document.getElementById('status').textContent")}`); }
        if (want.includes(s)) { return; }
        await sleep(100);
    }
    fail(`the page did not reach '${want}' in ${seconds} s (status: ${await js("return document.getElementById('status').textContent")})`);
};

await wd("POST", `${S}/url`, { url: `http://localhost:${httpPort}/` });
await waitState(["ready"], 60);
const prompt = await el("#prompt");
await wd("POST", `${S}/element/${prompt}/clear`, {});
await wd("POST", `${S}/element/${prompt}/value`, { text: PROMPT });
const tokens = await el("#tokens");
await wd("POST", `${S}/element/${tokens}/clear`, {});
await wd("POST", `${S}/element/${tokens}/value`, { text: String(NEW_TOKENS) });
await wd("POST", `${S}/element/${await el("#generate")}/click`, {});
await waitState(["done"], 120);
const text = await js("return document.getElementById('output').textContent");
const status = await js("return document.getElementById('status').textContent");
fs.writeFileSync(SHOT, Buffer.from(await wd("GET", `${S}/screenshot`), "base64"));
await wd("DELETE", S);

if (text !== expected) {
    fail(`the page wrote ${JSON.stringify(text)}\n  ./train_gpt2 --top-k 1 printed ${JSON.stringify(expected)}`);
}
console.log(`test_web: PASS: Chromium wrote the trainer's greedy ${NEW_TOKENS} tokens (${status}): ${JSON.stringify(text.slice(0, 80))}...; screenshot ${SHOT}`);
cleanup();
