// The official OpenAI Node SDK against examples/server on stories260K: every
// part of the API surface a client relies on. Run by CTest:
//   STREAMLLM_SERVER_BINARY=build/examples/server STREAMLLM_DATA_DIR=../shared node --test tests/sdk/
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import path from "node:path";
import OpenAI from "openai";

const binary = process.env.STREAMLLM_SERVER_BINARY;
const data = process.env.STREAMLLM_DATA_DIR;
assert.ok(binary && data, "set STREAMLLM_SERVER_BINARY and STREAMLLM_DATA_DIR");
const models = path.join(data, "models");

const servers = [];
after(() => servers.forEach((s) => s.kill("SIGTERM")));

// Starts a server on a free port; resolves to its base URL once it listens.
async function server(...args) {
  const child = spawn(binary, ["--model", path.join(models, "stories260K.bin"), "--tokenizer",
    path.join(models, "tok512.model"), "--port", "0", "-j", "1", ...args], { stdio: ["ignore", "pipe", "inherit"] });
  servers.push(child);
  const line = await new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
  const port = /:(\d+) \(/.exec(line)[1];
  return `http://127.0.0.1:${port}`;
}

const base = await server();
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
const user = (content) => [{ role: "user", content }];

async function streamText(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const pieces = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta?.content) pieces.push(c.delta.content);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { pieces, text: pieces.join(""), finish };
}

test("models.list() and models.retrieve() name the model; an unknown one is a NotFoundError", async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, "stories260K.bin");
  assert.equal(list.data[0].object, "model");
  const one = await client.models.retrieve("stories260K.bin");
  assert.equal(one.id, "stories260K.bin");
  await assert.rejects(client.models.retrieve("gpt-4o"), (e) => e instanceof OpenAI.NotFoundError && /does not exist/.test(e.message));
});

test("a chat completion, whole and streamed, says the same thing", async () => {
  const whole = await client.chat.completions.create({ model: "m", messages: user("Tell me a story."), max_tokens: 30, temperature: 0 });
  assert.equal(whole.object, "chat.completion");
  assert.equal(whole.choices[0].message.role, "assistant");
  assert.equal(whole.choices[0].finish_reason, "length");
  assert.equal(whole.usage.completion_tokens, 30);
  assert.equal(typeof whole.usage.prompt_tokens_details.cached_tokens, "number");
  const streamed = await streamText({ model: "m", messages: user("Tell me a story."), max_tokens: 30, temperature: 0 });
  assert.equal(streamed.text, whole.choices[0].message.content);
  assert.equal(streamed.finish, "length");
});

test("stop strings split across streamed pieces end the text before them, never emitted", async () => {
  const params = { model: "m", messages: user("Tell me a story about a dog."), max_tokens: 60, temperature: 0 };
  const full = await streamText(params);
  assert.ok(full.pieces.length > 10);
  // A stop string made of the end of one piece and the start of the next.
  let at = 0;
  for (let i = 0; i < 6; i++) at += full.pieces[i].length;
  const stop = full.text.slice(at - 2, at + 3);
  const expected = full.text.slice(0, full.text.indexOf(stop));
  const stopped = await streamText({ ...params, stop: ["zzzz", stop] });
  assert.equal(stopped.text, expected);
  assert.equal(stopped.finish, "stop");
  assert.ok(!stopped.pieces.some((p) => p.includes(stop)));
  const whole = await client.chat.completions.create({ ...params, stop });
  assert.equal(whole.choices[0].message.content, expected);
  assert.equal(whole.choices[0].finish_reason, "stop");
});

test("without a seed every request samples afresh; with one it repeats", async () => {
  const params = { model: "m", messages: user("Once upon a time"), max_tokens: 40, temperature: 1 };
  const texts = new Set();
  for (let i = 0; i < 3; i++) texts.add((await client.chat.completions.create(params)).choices[0].message.content);
  assert.ok(texts.size > 1, "three unseeded samples were all equal");
  const a = await client.chat.completions.create({ ...params, seed: 42 });
  const b = await client.chat.completions.create({ ...params, seed: 42 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test("content parts, the developer role and an assistant turn with null content are read as OpenAI defines them", async () => {
  const plain = await client.chat.completions.create({ model: "m", max_tokens: 20, temperature: 0,
    messages: [{ role: "system", content: "Be kind." }, { role: "user", content: "Hi there" }] });
  const parts = await client.chat.completions.create({ model: "m", max_tokens: 20, temperature: 0,
    messages: [{ role: "developer", content: [{ type: "text", text: "Be kind." }] },
               { role: "user", content: [{ type: "text", text: "Hi there" }] }] });
  assert.equal(parts.choices[0].message.content, plain.choices[0].message.content);
  const withNull = await client.chat.completions.create({ model: "m", max_tokens: 10, temperature: 0,
    messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: null }, { role: "user", content: "And?" }] });
  assert.equal(withNull.choices[0].finish_reason, "length");
});

test("prompt arrays (strings and token ids) give one choice each, as a single prompt would", async () => {
  const one = await client.completions.create({ model: "m", prompt: "The cat", max_tokens: 12, temperature: 0 });
  const two = await client.completions.create({ model: "m", prompt: "The dog", max_tokens: 12, temperature: 0 });
  const both = await client.completions.create({ model: "m", prompt: ["The cat", "The dog"], max_tokens: 12, temperature: 0 });
  assert.deepEqual(both.choices.map((c) => c.index), [0, 1]);
  assert.equal(both.choices[0].text, one.choices[0].text);
  assert.equal(both.choices[1].text, two.choices[0].text);
  assert.equal(both.usage.completion_tokens, 24);
  const ids = await client.completions.create({ model: "m", prompt: [1, 403, 407, 261, 378], max_tokens: 8, temperature: 0 });
  const text = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
  assert.equal(ids.choices[0].text, text.choices[0].text);
});

test("n > 1 gives n choices; greedy ones are equal, sampled ones differ", async () => {
  const greedy = await client.chat.completions.create({ model: "m", messages: user("Hello"), max_tokens: 15, temperature: 0, n: 3 });
  assert.deepEqual(greedy.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(new Set(greedy.choices.map((c) => c.message.content)).size, 1);
  assert.equal(greedy.usage.completion_tokens, 45);
  const sampled = await client.chat.completions.create({ model: "m", messages: user("Hello"), max_tokens: 30, temperature: 1, n: 4, seed: 7 });
  assert.ok(new Set(sampled.choices.map((c) => c.message.content)).size > 1);
});

test("logprobs: chat's content entries and the completions lists, with top alternatives", async () => {
  const chat = await client.chat.completions.create({ model: "m", messages: user("Hi"), max_tokens: 10, temperature: 0,
    logprobs: true, top_logprobs: 3 });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, 10);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token);  // greedy: the chosen token is the most likely
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.ok(Array.isArray(t.bytes));
  }
  const streamed = await client.chat.completions.create({ model: "m", messages: user("Hi"), max_tokens: 10, temperature: 0,
    logprobs: true, top_logprobs: 3, stream: true });
  let n = 0;
  for await (const chunk of streamed) n += chunk.choices[0]?.logprobs?.content?.length ?? 0;
  assert.equal(n, 10);
  const comp = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 6, temperature: 0, logprobs: 2 });
  const lp = comp.choices[0].logprobs;
  assert.equal(lp.tokens.length, 6);
  assert.equal(lp.token_logprobs.length, 6);
  assert.equal(lp.top_logprobs.length, 6);
  assert.equal(Object.keys(lp.top_logprobs[0]).length, 2);
  assert.equal(lp.text_offset[0], 0);
  assert.equal(lp.tokens.join(""), comp.choices[0].text);
});

test("presence and frequency penalties change what greedy decoding repeats", async () => {
  const params = { model: "m", messages: user("Tell me a story."), max_tokens: 80, temperature: 0 };
  const plain = await client.chat.completions.create(params);
  const penalised = await client.chat.completions.create({ ...params, frequency_penalty: 2, presence_penalty: 2 });
  assert.notEqual(penalised.choices[0].message.content, plain.choices[0].message.content);
  const words = (s) => s.split(/\s+/).filter(Boolean);
  const repeats = (s) => words(s).length - new Set(words(s)).size;
  assert.ok(repeats(penalised.choices[0].message.content) < repeats(plain.choices[0].message.content));
  await assert.rejects(client.chat.completions.create({ ...params, presence_penalty: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && /presence_penalty/.test(e.message));
});

test("max_completion_tokens bounds the answer, and stream_options.include_usage ends a stream with usage", async () => {
  const r = await client.chat.completions.create({ model: "m", messages: user("Hi"), max_completion_tokens: 7, temperature: 0 });
  assert.equal(r.usage.completion_tokens, 7);
  const stream = await client.chat.completions.create({ model: "m", messages: user("Hi"), max_tokens: 9, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 9);
  assert.ok(chunks.slice(0, -1).every((c) => c.usage === null));
});

test("tools and response formats we do not support are a 400 naming them", async () => {
  await assert.rejects(client.chat.completions.create({ model: "m", messages: user("Hi"),
    tools: [{ type: "function", function: { name: "f", parameters: {} } }] }),
    (e) => e instanceof OpenAI.BadRequestError && /'tools'/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model: "m", messages: user("Hi"), response_format: { type: "json_object" } }),
    (e) => e instanceof OpenAI.BadRequestError && /response_format/.test(e.message));
});

test("every error has a JSON body: 404, 405", async () => {
  for (const [method, url, status] of [["GET", "/v1/nothing", 404], ["GET", "/v1/chat/completions", 405], ["POST", "/v1/models", 405]]) {
    const r = await fetch(base + url, { method });
    assert.equal(r.status, status);
    const body = await r.json();
    assert.equal(body.error.code, status);
    assert.ok(body.error.message.length > 5);
  }
});

test("/tokenize, /detokenize and /metrics", async () => {
  const post = (p, body) => fetch(base + p, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const t = await (await post("/tokenize", { content: "Once upon a time" })).json();
  assert.deepEqual(t.tokens, [403, 407, 261, 378]);
  const d = await (await post("/detokenize", { tokens: [403, 407, 261, 378] })).json();
  assert.equal(d.content, "Once upon a time");
  const m = await (await fetch(base + "/metrics")).text();
  for (const name of ["streamllm_requests_total", "streamllm_prompt_tokens_total", "streamllm_generated_tokens_total",
    "streamllm_cached_tokens_total", "streamllm_sequences_running", "streamllm_sequences_waiting",
    "streamllm_cache_pool_bytes", "streamllm_time_to_first_token_seconds_bucket"])
    assert.ok(m.includes(name), name);
});

test("a full server says 429 with Retry-After, and the SDK waits that long before it retries", async () => {
  const busyBase = await server("--max-sequences", "1", "--max-waiting", "0", "--window", "60");
  const busy = new OpenAI({ baseURL: `${busyBase}/v1`, apiKey: "unused", maxRetries: 0 });
  const abort = new AbortController();
  const endless = await busy.completions.create({ model: "m", prompt: "Once", max_tokens: 1000000, stream: true,
    ignore_eos: true }, { signal: abort.signal });
  const reading = (async () => { try { for await (const _ of endless) { /* keep the sequence busy */ } } catch {} })();
  await new Promise((r) => setTimeout(r, 100));
  await assert.rejects(busy.completions.create({ model: "m", prompt: "Hi", max_tokens: 2 }),
    (e) => e instanceof OpenAI.RateLimitError && e.headers.get("retry-after") === "1");
  // With retries, the SDK waits the second it was told to; the slot is free by then.
  const retrying = new OpenAI({ baseURL: `${busyBase}/v1`, apiKey: "unused", maxRetries: 2 });
  const t0 = Date.now();
  setTimeout(() => abort.abort(), 300);
  const ok = await retrying.completions.create({ model: "m", prompt: "Hi", max_tokens: 2 });
  assert.equal(ok.usage.completion_tokens, 2);
  assert.ok(Date.now() - t0 >= 900, `retried after ${Date.now() - t0} ms`);
  await reading;
});

test("--api-key: AuthenticationError without it, /health open", async () => {
  const keyed = await server("--api-key", "sesame");
  const wrong = new OpenAI({ baseURL: `${keyed}/v1`, apiKey: "open", maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  const right = new OpenAI({ baseURL: `${keyed}/v1`, apiKey: "sesame", maxRetries: 0 });
  assert.equal((await right.models.list()).data.length, 1);
  assert.equal((await fetch(keyed + "/health")).status, 200);
});

test("--cors-origin: the allowed origin gets CORS headers and preflights; others none; off by default", async () => {
  const cors = await server("--cors-origin", "http://app.example");
  const r = await fetch(cors + "/v1/models", { headers: { Origin: "http://app.example" } });
  assert.equal(r.headers.get("access-control-allow-origin"), "http://app.example");
  const pre = await fetch(cors + "/v1/chat/completions", { method: "OPTIONS", headers: { Origin: "http://app.example",
    "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type" } });
  assert.equal(pre.status, 204);
  assert.match(pre.headers.get("access-control-allow-headers"), /Content-Type/);
  const other = await fetch(cors + "/v1/models", { headers: { Origin: "http://evil.example" } });
  assert.equal(other.headers.get("access-control-allow-origin"), null);
  const off = await fetch(base + "/v1/models", { headers: { Origin: "http://app.example" } });
  assert.equal(off.headers.get("access-control-allow-origin"), null);
});

test("a ten-turn chat resent whole each turn reports the history as cached_tokens", async () => {
  const messages = [{ role: "system", content: "You tell short stories." }];
  let history = 0;
  for (let turn = 1; turn <= 10; turn++) {
    messages.push({ role: "user", content: `Turn ${turn}: what happened next?` });
    const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 12, temperature: 0 });
    if (turn > 1) assert.equal(r.usage.prompt_tokens_details.cached_tokens, history);
    history = r.usage.prompt_tokens + r.usage.completion_tokens + (r.choices[0].finish_reason === "stop" ? 0 : 1);
    messages.push({ role: "assistant", content: r.choices[0].message.content });
  }
});
