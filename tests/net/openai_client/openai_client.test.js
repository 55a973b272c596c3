'use strict';
// `troupe serve` driven by the official `openai` npm client (a real client,
// pinned in package.json). Two servers are started here:
//
// - examples/deploy-qwen3-dummy-cpu.yaml (with an api key): a Qwen3-shaped
//   model with random weights and the real Qwen3 tokenizer. Its text is
//   random, so the checks are about everything around it: models list, chat
//   and completions streamed and not, n = 2, stop strings, finish reasons,
//   usage against the counted tokens, logprobs shapes, errors as the
//   client's error classes, and /tokenize of chat messages against the
//   tokenizer fixtures' golden ids.
// - examples/deploy-cpu.yaml: the tiny-llama fixture (no tokenizer): token-id
//   prompts at temperature 0 must give the fixture's golden greedy ids.
// - examples/deploy-cpu-lora.yaml: the same model with two PEFT adapters
//   chosen by `model`: concurrent requests mixing both adapters and the base
//   must each give their own golden ids (peft's), /v1/models lists the
//   adapters with root and parent.
//
// Run by CTest as openai_client_test (tests/net/CMakeLists.txt), or by hand
// from the repository root:
//   TROUPE_BIN=build/troupe node --test tests/net/openai_client/openai_client.test.js
// Needs Node >= 18 and `npm ci --prefix tests/net/openai_client`
// (scripts/setup.sh does both).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');

let OpenAI;
try {
  OpenAI = require('openai');
} catch (e) {
  throw new Error(
    'the openai npm package is not installed: run scripts/setup.sh ' +
      '(or npm ci --prefix tests/net/openai_client)\n' + e.message);
}

const ROOT = path.resolve(__dirname, '..', '..', '..');
const TROUPE_BIN = path.resolve(ROOT, process.env.TROUPE_BIN || 'build/troupe');
const CASE = { timeout: 60000 };

const QWEN3 = 'qwen3-tiny';
const API_KEY = 'troupe-test-key';
const MESSAGES = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Hello there' },
];
const PROMPT = 'The capital of France is';

function readJson(relative) {
  return JSON.parse(fs.readFileSync(path.join(ROOT, relative), 'utf8'));
}

// ---------------------------------------------------------------- servers

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function healthy(port) {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(2000) });
    await res.arrayBuffer();
    return res.status === 200;
  } catch {
    return false;
  }
}

function launch(args, port) {
  const server = { port, log: '', exit: null };
  server.child = spawn(TROUPE_BIN, ['serve', ...args, '--host', '127.0.0.1', '--port', String(port)], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const append = (data) => {
    server.log = (server.log + data).slice(-20000);
  };
  server.child.stdout.on('data', append);
  server.child.stderr.on('data', append);
  server.exited = new Promise((resolve) => {
    server.child.on('error', (e) => {
      append(`spawn ${TROUPE_BIN}: ${e.message}\n`);
      server.exit = server.exit || { code: null, signal: null, error: e };
      resolve(server.exit);
    });
    server.child.on('exit', (code, signal) => {
      server.exit = server.exit || { code, signal };
      resolve(server.exit);
    });
  });
  return server;
}

// SIGTERM (graceful drain), then the exit status; SIGKILL after 20 s.
async function stopServer(server, signal = 'SIGTERM') {
  if (server.exit === null) server.child.kill(signal);
  let timer;
  const exit = await Promise.race([server.exited, new Promise((resolve) => {
    timer = setTimeout(() => resolve(null), 20000);
  })]);
  clearTimeout(timer);
  if (exit === null) {
    server.child.kill('SIGKILL');
    await server.exited;
    throw new Error(`troupe serve did not exit within 20 s of ${signal}\n${server.log}`);
  }
  return exit;
}

// `troupe serve ARGS` on a free port of 127.0.0.1, once GET /health is 200.
async function startServer(args) {
  let log = '';
  for (let attempt = 0; attempt < 3; ++attempt) {
    const server = launch(args, await freePort());
    const deadline = Date.now() + 60000;
    while (server.exit === null && Date.now() < deadline) {
      if (await healthy(server.port)) return server;
      await sleep(100);
    }
    log = server.log;
    await stopServer(server, 'SIGKILL').catch(() => {});
    if (server.exit && server.exit.error) break;  // the binary is missing: no retry
  }
  throw new Error(`troupe serve ${args.join(' ')} never became healthy\n${log}`);
}

async function stopAndCheck(server) {
  if (!server) return;
  const exit = await stopServer(server);
  assert.deepEqual(exit, { code: 0, signal: null }, `troupe serve exit after SIGTERM\n${server.log}`);
}

// Plain HTTP for the routes that are not OpenAI's (/tokenize, /detokenize).
async function post(server, route, body) {
  const res = await fetch(`http://127.0.0.1:${server.port}${route}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30000),
  });
  const text = await res.text();
  assert.equal(res.status, 200, `${route}: ${text}`);
  return JSON.parse(text);
}

function client(server, apiKey = API_KEY) {
  return new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${server.port}/v1`, maxRetries: 0, timeout: 60000 });
}

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

// Code points, so that a substring never splits a surrogate pair.
const chars = (s) => Array.from(s);

function assertUsage(usage, promptTokens, completionTokens) {
  assert.equal(usage.prompt_tokens, promptTokens, 'usage.prompt_tokens');
  assert.equal(usage.completion_tokens, completionTokens, 'usage.completion_tokens');
  assert.equal(usage.total_tokens, promptTokens + completionTokens, 'usage.total_tokens');
}

// A stop string that occurs in `text`: two characters from its middle
// (neither a replacement character nor whitespace only).
function pickStop(text) {
  const cs = chars(text);
  for (let i = Math.floor(cs.length / 2); i + 2 <= cs.length; ++i) {
    const s = cs.slice(i, i + 2).join('');
    if (!s.includes('\uFFFD') && s.trim() !== '') return s;
  }
  for (let i = 0; i + 2 <= cs.length; ++i) {
    const s = cs.slice(i, i + 2).join('');
    if (!s.includes('\uFFFD') && s.trim() !== '') return s;
  }
  assert.fail(`no usable stop string in ${JSON.stringify(text)}`);
}

// ------------------------------------------------- the qwen3 dummy server

describe('qwen3 dummy deployment (text)', () => {
  let server;
  let oai;
  before(async () => {
    server = await startServer(['--config', 'examples/deploy-qwen3-dummy-cpu.yaml', '--api-key', API_KEY]);
    oai = client(server);
  });
  after(async () => {
    await stopAndCheck(server);
  });

  const tokenizeMessages = (messages) => post(server, '/tokenize', { model: QWEN3, messages });
  const tokenizePrompt = (prompt) => post(server, '/tokenize', { model: QWEN3, prompt });

  it('lists the served model', CASE, async () => {
    const page = await oai.models.list();
    assert.equal(page.data.length, 1);
    const m = page.data[0];
    assert.equal(m.id, QWEN3);
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'troupe');
    assert.equal(m.max_model_len, 4096);
    assert.ok(Number.isInteger(m.created) && m.created > 0);
    const ids = [];
    for await (const model of oai.models.list()) ids.push(model.id);
    assert.deepEqual(ids, [QWEN3]);
  });

  it('rejects a wrong api key with AuthenticationError 401', CASE, async () => {
    await assert.rejects(client(server, 'wrong-key').models.list(), (e) => {
      assert.ok(e instanceof OpenAI.AuthenticationError, `${e}`);
      assert.equal(e.status, 401);
      return true;
    });
  });

  it('response_format json_schema (strict): beta.chat.completions.parse returns the object; bad schemas are 400s',
    CASE, async () => {
      const schema = {
        type: 'object',
        properties: {
          city: { type: 'string', maxLength: 12 },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
          days: { type: 'integer', minimum: 1, maximum: 7 },
        },
        required: ['city', 'unit', 'days'],
        additionalProperties: false,
      };
      for (const seed of [1, 2, 3]) {
        const r = await oai.beta.chat.completions.parse({
          model: QWEN3, messages: MESSAGES, max_tokens: 400, seed,
          response_format: { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } },
        });
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
        const p = c.message.parsed;
        assert.deepEqual(Object.keys(p), ['city', 'unit', 'days'], c.message.content);
        assert.equal(typeof p.city, 'string');
        assert.ok([...p.city].length <= 12, p.city);
        assert.ok(['celsius', 'fahrenheit'].includes(p.unit), p.unit);
        assert.ok(Number.isInteger(p.days) && p.days >= 1 && p.days <= 7, `${p.days}`);
      }
      // Streamed, the chunks join into the same kind of object.
      const stream = await oai.chat.completions.create({
        model: QWEN3, messages: MESSAGES, max_tokens: 400, seed: 1, stream: true,
        response_format: { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } },
      });
      let text = '';
      let finish = null;
      for await (const chunk of stream) {
        for (const ch of chunk.choices) {
          text += ch.delta.content ?? '';
          finish = ch.finish_reason ?? finish;
        }
      }
      assert.equal(finish, 'stop', text);
      assert.ok(['celsius', 'fahrenheit'].includes(JSON.parse(text).unit), text);
      await assert.rejects(
        oai.chat.completions.create({
          model: QWEN3, messages: MESSAGES, max_tokens: 8,
          response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', not: {} } } },
        }),
        (e) => e instanceof OpenAI.BadRequestError && /unsupported keyword 'not'/.test(e.message));
      await assert.rejects(
        oai.completions.create({ model: QWEN3, prompt: 'x', max_tokens: 8, guided_regex: 'a(b' }),
        (e) => e instanceof OpenAI.BadRequestError && /position/.test(e.message));
    });

  it('tool calling round trip: tools + tool_choice required -> tool_calls -> a tool message -> an answer, ' +
     'streamed and not', CASE, async () => {
    const tools = [{
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'The weather in a city',
        strict: true,
        parameters: {
          type: 'object',
          properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] }, unit: { type: 'string', enum: ['c', 'f'] } },
          required: ['city', 'unit'],
          additionalProperties: false,
        },
      },
    }];
    const weather = ({ city, unit }) => JSON.stringify({ city, temperature: unit === 'c' ? 21 : 70 });
    const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const answer = async (messages) => {
      const r = await oai.chat.completions.create({ model: QWEN3, messages, tools, max_tokens: 6, seed: 1 });
      const c = r.choices[0];
      assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
      assert.equal(typeof c.message.content, 'string');
      assert.deepEqual(c.message.tool_calls, []);
    };
    for (const seed of [1, 2]) {
      // Not streamed: the client's parse() reads the strict tool's arguments.
      const r = await oai.beta.chat.completions.parse({
        model: QWEN3, messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false,
        max_tokens: 300, seed,
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
      assert.equal(c.message.tool_calls.length, 1);
      const call = c.message.tool_calls[0];
      assert.equal(call.type, 'function');
      assert.ok(call.id.startsWith('call_'), call.id);
      assert.equal(call.function.name, 'get_weather');
      const args = call.function.parsed_arguments;
      assert.deepEqual(args, JSON.parse(call.function.arguments));
      assert.ok(['Paris', 'Oslo'].includes(args.city), call.function.arguments);
      await answer([...ask, c.message, { role: 'tool', tool_call_id: call.id, content: weather(args) }]);
    }
    // Streamed: the client's stream helper puts the tool_calls deltas together.
    const stream = oai.beta.chat.completions.stream({
      model: QWEN3, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_tokens: 300, seed: 3,
    });
    let argumentChunks = 0;
    stream.on('chunk', (chunk) => {
      for (const ch of chunk.choices) {
        for (const d of ch.delta.tool_calls ?? []) if (d.function?.arguments) argumentChunks += 1;
      }
    });
    const done = await stream.finalChatCompletion();
    const c = done.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    assert.ok(argumentChunks > 1, `arguments came in ${argumentChunks} chunk(s)`);
    const args = JSON.parse(call.function.arguments);
    assert.ok(['c', 'f'].includes(args.unit), call.function.arguments);
    await answer([...ask, c.message, { role: 'tool', tool_call_id: call.id, content: weather(args) }]);
  });

  it('chat: usage equals the counted tokens, finish_reason length', CASE, async () => {
    const tok = await tokenizeMessages(MESSAGES);
    const r = await oai.chat.completions.create({
      model: QWEN3, messages: MESSAGES, max_tokens: 8, ignore_eos: true, return_token_ids: true,
    });
    assert.equal(r.object, 'chat.completion');
    assert.ok(r.id.startsWith('chatcmpl-'), r.id);
    assert.equal(r.model, QWEN3);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.equal(c.finish_reason, 'length');
    assert.deepEqual(c.prompt_token_ids, tok.tokens);
    assert.equal(c.token_ids.length, 8);
    assertUsage(r.usage, tok.count, c.token_ids.length);
  });

  it('completions: usage equals the counted tokens, text is the detokenized ids', CASE, async () => {
    const tok = await tokenizePrompt(PROMPT);
    const r = await oai.completions.create({
      model: QWEN3, prompt: PROMPT, max_tokens: 8, seed: 11, temperature: 1, ignore_eos: true,
      return_token_ids: true,
    });
    assert.equal(r.object, 'text_completion');
    assert.ok(r.id.startsWith('cmpl-'), r.id);
    assert.equal(r.model, QWEN3);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'length');
    assert.equal(c.logprobs, null);
    assert.deepEqual(c.prompt_token_ids, tok.tokens);
    assert.equal(c.token_ids.length, 8);
    assertUsage(r.usage, tok.count, 8);
    const detok = await post(server, '/detokenize', { model: QWEN3, tokens: c.token_ids });
    assert.equal(c.text, detok.prompt);
  });

  it('finish_reason length at max_tokens 1', CASE, async () => {
    const r = await oai.completions.create({ model: QWEN3, prompt: PROMPT, max_tokens: 1, return_token_ids: true });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.choices[0].token_ids.length, 1);
    assert.equal(r.usage.completion_tokens, 1);
  });

  it('n = 2: two choices by index, usage counts the prompt once', CASE, async () => {
    const tok = await tokenizePrompt(PROMPT);
    const r = await oai.completions.create({
      model: QWEN3, prompt: PROMPT, n: 2, max_tokens: 5, temperature: 1, seed: 3, ignore_eos: true,
      return_token_ids: true,
    });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'length');
      assert.equal(c.token_ids.length, 5);
    }
    assertUsage(r.usage, tok.count, 10);

    const chatTok = await tokenizeMessages(MESSAGES);
    const chat = await oai.chat.completions.create({
      model: QWEN3, messages: MESSAGES, n: 2, max_tokens: 4, ignore_eos: true, return_token_ids: true,
    });
    assert.deepEqual(chat.choices.map((c) => c.index), [0, 1]);
    for (const c of chat.choices) {
      assert.equal(c.message.role, 'assistant');
      assert.equal(c.finish_reason, 'length');
      assert.equal(c.token_ids.length, 4);
    }
    assertUsage(chat.usage, chatTok.count, 8);
  });

  it('completions: a stop string ends the text and is never in it, streamed or not', CASE, async () => {
    const base = { model: QWEN3, prompt: PROMPT, max_tokens: 16, temperature: 1, seed: 1234, ignore_eos: true };
    const full = await oai.completions.create({ ...base, return_token_ids: true });
    assert.equal(full.choices[0].finish_reason, 'length');
    const text = full.choices[0].text;
    const stop = pickStop(text);
    const expected = text.slice(0, text.indexOf(stop));

    const r = await oai.completions.create({ ...base, stop: [stop], return_token_ids: true });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop');
    assert.equal(c.stop_reason, stop);
    assert.equal(c.text, expected, `stop ${JSON.stringify(stop)} in ${JSON.stringify(text)}`);
    assert.ok(!c.text.includes(stop));
    assert.ok(c.token_ids.length < 16);
    assert.equal(r.usage.completion_tokens, c.token_ids.length);

    // A plain string works as well as a list.
    const single = await oai.completions.create({ ...base, stop });
    assert.equal(single.choices[0].text, expected);

    const chunks = await collect(await oai.completions.create({ ...base, stop: [stop], stream: true }));
    const streamed = chunks.map((k) => k.choices.map((x) => x.text).join('')).join('');
    assert.equal(streamed, expected);
    assert.equal(chunks[chunks.length - 1].choices[0].finish_reason, 'stop');
  });

  it('chat: a stop string ends the content and is never in it', CASE, async () => {
    const base = { model: QWEN3, messages: MESSAGES, max_tokens: 16, temperature: 1, seed: 99, ignore_eos: true };
    const full = await oai.chat.completions.create(base);
    const text = full.choices[0].message.content;
    const stop = pickStop(text);
    const r = await oai.chat.completions.create({ ...base, stop: [stop], return_token_ids: true });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop');
    assert.equal(c.message.content, text.slice(0, text.indexOf(stop)), `stop ${JSON.stringify(stop)} in ${JSON.stringify(text)}`);
    assert.ok(!c.message.content.includes(stop));
    assert.equal(r.usage.completion_tokens, c.token_ids.length);
  });

  it('completions logprobs: 2 gives per-token arrays of the completion length', CASE, async () => {
    const r = await oai.completions.create({
      model: QWEN3, prompt: PROMPT, max_tokens: 6, temperature: 0, logprobs: 2, ignore_eos: true,
    });
    const c = r.choices[0];
    const n = r.usage.completion_tokens;
    assert.equal(n, 6);
    const lp = c.logprobs;
    assert.deepEqual(Object.keys(lp).sort(), ['text_offset', 'token_logprobs', 'tokens', 'top_logprobs']);
    for (const k of Object.keys(lp)) assert.equal(lp[k].length, n, `logprobs.${k}`);
    // Tokens that are partial UTF-8 decode to U+FFFD on their own.
    if (!lp.tokens.some((x) => x.includes('\uFFFD'))) assert.equal(lp.tokens.join(''), c.text);
    assert.equal(lp.text_offset[0], 0);
    for (let i = 0; i < n; ++i) {
      assert.equal(typeof lp.tokens[i], 'string');
      assert.ok(lp.token_logprobs[i] <= 0, `token_logprobs[${i}]`);
      if (i > 0) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1], `text_offset[${i}] increases`);
      const top = lp.top_logprobs[i];
      // Greedy: the sampled token is the top one, so no third entry (fewer
      // when two ids decode to the same string).
      const keys = Object.keys(top).length;
      assert.ok(keys >= 1 && keys <= 2, `top_logprobs[${i}]: ${JSON.stringify(top)}`);
      assert.equal(top[lp.tokens[i]], lp.token_logprobs[i], `top_logprobs[${i}] holds the sampled token`);
      assert.equal(Math.max(...Object.values(top)), lp.token_logprobs[i]);
    }

    const stream = await collect(await oai.completions.create({
      model: QWEN3, prompt: PROMPT, max_tokens: 6, temperature: 0, logprobs: 2, ignore_eos: true, stream: true,
    }));
    const tokens = [];
    for (const k of stream) for (const x of k.choices) tokens.push(...x.logprobs.tokens);
    assert.deepEqual(tokens, lp.tokens);
  });

  // vLLM (and OpenAI) count characters (Python len of the decoded text).
  it('completions logprobs: text_offset counts characters, as vLLM does', CASE, async () => {
    const r = await oai.completions.create({
      model: QWEN3, prompt: PROMPT, max_tokens: 8, temperature: 1, seed: 5, logprobs: 1, ignore_eos: true,
    });
    const lp = r.choices[0].logprobs;
    let offset = 0;
    for (let i = 0; i < lp.tokens.length; ++i) {
      assert.equal(lp.text_offset[i], offset, `text_offset[${i}] of ${JSON.stringify(lp.tokens)}`);
      offset += chars(lp.tokens[i]).length;
    }
  });

  // With sampling the sampled token may be outside the top k; vLLM and
  // OpenAI always include it (up to logprobs + 1 entries).
  it('completions logprobs: top_logprobs always holds the sampled token, as vLLM does', CASE, async () => {
    const r = await oai.completions.create({
      model: QWEN3, prompt: PROMPT, max_tokens: 8, temperature: 1, seed: 5, logprobs: 1, ignore_eos: true,
    });
    const lp = r.choices[0].logprobs;
    for (let i = 0; i < lp.tokens.length; ++i) {
      const top = lp.top_logprobs[i];
      assert.ok(Object.keys(top).length <= 2, `top_logprobs[${i}]: ${JSON.stringify(top)}`);
      assert.equal(top[lp.tokens[i]], lp.token_logprobs[i], `top_logprobs[${i}]: ${JSON.stringify(top)}`);
    }
  });

  it('chat logprobs: top_logprobs 3 gives 3 alternatives per token', CASE, async () => {
    const r = await oai.chat.completions.create({
      model: QWEN3, messages: MESSAGES, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3,
      ignore_eos: true,
    });
    const c = r.choices[0];
    const content = c.logprobs.content;
    assert.equal(content.length, r.usage.completion_tokens);
    const tokens = content.map((x) => x.token);
    if (!tokens.some((x) => x.includes('\uFFFD'))) assert.equal(tokens.join(''), c.message.content);
    for (const [i, x] of content.entries()) {
      assert.equal(typeof x.token, 'string');
      assert.ok(x.logprob <= 0);
      assert.deepEqual(x.bytes, Array.from(Buffer.from(x.token, 'utf8')), `content[${i}].bytes`);
      assert.equal(x.top_logprobs.length, 3, `content[${i}].top_logprobs`);
      for (let j = 1; j < 3; ++j) assert.ok(x.top_logprobs[j].logprob <= x.top_logprobs[j - 1].logprob);
      for (const alt of x.top_logprobs) {
        assert.equal(typeof alt.token, 'string');
        assert.ok(Array.isArray(alt.bytes));
      }
      // Greedy: the chosen token is the most likely one.
      assert.equal(x.top_logprobs[0].token, x.token);
      assert.equal(x.top_logprobs[0].logprob, x.logprob);
    }
    const noLogprobs = await oai.chat.completions.create({ model: QWEN3, messages: MESSAGES, max_tokens: 2 });
    assert.equal(noLogprobs.choices[0].logprobs, null);
  });

  it('chat stream: role first, deltas concatenate to the non-streamed text, usage last', CASE, async () => {
    const base = { model: QWEN3, messages: MESSAGES, max_tokens: 10, temperature: 0, n: 2, ignore_eos: true };
    const plain = await oai.chat.completions.create(base);
    const chunks = await collect(await oai.chat.completions.create({
      ...base, stream: true, stream_options: { include_usage: true },
    }));
    const content = ['', ''];
    const seen = [0, 0];
    const finish = [null, null];
    const id = chunks[0].id;
    assert.ok(id.startsWith('chatcmpl-'), id);
    for (const chunk of chunks.slice(0, -1)) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      assert.equal(chunk.id, id);
      assert.equal(chunk.model, QWEN3);
      assert.equal(chunk.choices.length, 1);
      const x = chunk.choices[0];
      assert.equal(finish[x.index], null, `a chunk of choice ${x.index} after its finishing one`);
      if (seen[x.index] === 0) assert.equal(x.delta.role, 'assistant');
      else assert.equal(x.delta.role, undefined);
      content[x.index] += x.delta.content || '';
      finish[x.index] = x.finish_reason;
      ++seen[x.index];
    }
    assert.deepEqual(finish, ['length', 'length']);
    assert.deepEqual(content, plain.choices.map((c) => c.message.content));
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, plain.usage);
    assert.equal(last.usage.completion_tokens, 20);
  });

  it('completions stream: text deltas concatenate to the non-streamed text, usage last', CASE, async () => {
    const base = { model: QWEN3, prompt: PROMPT, max_tokens: 8, temperature: 1, seed: 21, ignore_eos: true };
    const plain = await oai.completions.create(base);
    const chunks = await collect(await oai.completions.create({
      ...base, stream: true, stream_options: { include_usage: true },
    }));
    const body = chunks.slice(0, -1);
    for (const k of body) {
      assert.equal(k.object, 'text_completion');
      assert.equal(k.choices.length, 1);
      assert.equal(k.choices[0].index, 0);
    }
    assert.equal(body.map((k) => k.choices[0].text).join(''), plain.choices[0].text);
    assert.ok(body.slice(0, -1).every((k) => k.choices[0].finish_reason === null));
    assert.equal(body[body.length - 1].choices[0].finish_reason, 'length');
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, plain.usage);

    // Without include_usage there is no usage chunk.
    const noUsage = await collect(await oai.completions.create({ ...base, stream: true }));
    assert.ok(noUsage.every((k) => k.choices.length === 1 && !k.usage));
  });

  it('errors come back as the client error classes', CASE, async () => {
    const expectError = (promise, cls, status, pattern) =>
      assert.rejects(promise, (e) => {
        assert.ok(e instanceof cls, `expected ${cls.name}, got ${e}`);
        assert.equal(e.status, status);
        assert.match(e.message, pattern);
        assert.equal(typeof e.error, 'object');
        return true;
      });
    await expectError(
      oai.chat.completions.create({ model: 'no-such-model', messages: MESSAGES, max_tokens: 2 }),
      OpenAI.NotFoundError, 404, /The model `no-such-model` does not exist/);
    await expectError(
      oai.completions.create({ model: 'no-such-model', prompt: PROMPT, max_tokens: 2, stream: true }),
      OpenAI.NotFoundError, 404, /does not exist/);
    await expectError(
      oai.completions.create({ model: QWEN3, prompt: PROMPT, max_tokens: 5000 }),
      OpenAI.BadRequestError, 400, /maximum context length is 4096 tokens/);
    await expectError(
      oai.chat.completions.create({ model: QWEN3, messages: MESSAGES, max_tokens: 5000, stream: true }),
      OpenAI.BadRequestError, 400, /maximum context length is 4096 tokens/);
    await expectError(
      oai.completions.create({ model: QWEN3, prompt: PROMPT, max_tokens: 'many' }),
      OpenAI.BadRequestError, 400, /max_tokens/);
  });

  it('/tokenize of chat messages equals the golden chat ids (tokenizer fixtures)', CASE, async () => {
    const golden = readJson('tests/data/tokenizers/golden.json').tokenizers.qwen3.chat;
    assert.ok(golden.length > 0);
    for (const g of golden) {
      const tok = await post(server, '/tokenize', {
        model: QWEN3, messages: g.messages, add_generation_prompt: g.add_generation_prompt,
      });
      assert.deepEqual(tok.tokens, g.ids, JSON.stringify(g.messages));
      assert.equal(tok.count, g.ids.length);
      const detok = await post(server, '/detokenize', { model: QWEN3, tokens: g.ids });
      assert.equal(detok.prompt, g.text);
    }
  });
});

// ---------------------------------------------- the tiny-llama fixture

describe('tiny-llama fixture (token ids)', () => {
  const MODEL = 'tests/data/models/tiny-llama';
  const golden = readJson(`${MODEL}/golden.json`).cases;
  let server;
  let oai;
  before(async () => {
    server = await startServer(['--config', 'examples/deploy-cpu.yaml']);
    oai = client(server);
  });
  after(async () => {
    await stopAndCheck(server);
  });

  it('lists the fixture model', CASE, async () => {
    const page = await oai.models.list();
    assert.deepEqual(page.data.map((m) => m.id), [MODEL]);
    assert.equal(page.data[0].max_model_len, 2048);
  });

  it('token-id prompts at temperature 0 give the golden greedy ids', CASE, async () => {
    assert.ok(golden.length > 0);
    for (const g of golden) {
      const r = await oai.completions.create({
        model: MODEL, prompt: g.prompt_ids, max_tokens: g.greedy_ids.length, temperature: 0, ignore_eos: true,
      });
      const c = r.choices[0];
      assert.deepEqual(c.token_ids, g.greedy_ids, `prompt of ${g.prompt_ids.length} ids`);
      assert.equal(c.finish_reason, 'length');
      assertUsage(r.usage, g.prompt_ids.length, g.greedy_ids.length);
    }
  });

  it('best_of 1 (what vLLM\'s benchmark client sends) is accepted; best_of 2 is a 400', CASE, async () => {
    const g = golden[0];
    const r = await oai.completions.create({
      model: MODEL, prompt: g.prompt_ids, max_tokens: g.greedy_ids.length, temperature: 0, ignore_eos: true,
      best_of: 1,
    });
    assert.deepEqual(r.choices[0].token_ids, g.greedy_ids);
    await assert.rejects(
      oai.completions.create({ model: MODEL, prompt: g.prompt_ids, max_tokens: 2, best_of: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && /best_of/.test(e.message));
  });

  it('several token-id prompts in one request, streamed, give the golden ids by index', CASE, async () => {
    const cases = golden.slice(0, 3);
    const chunks = await collect(await oai.completions.create({
      model: MODEL, prompt: cases.map((g) => g.prompt_ids), max_tokens: 24, temperature: 0, ignore_eos: true,
      stream: true, stream_options: { include_usage: true },
    }));
    const ids = cases.map(() => []);
    const finish = cases.map(() => null);
    for (const k of chunks.slice(0, -1)) {
      for (const x of k.choices) {
        ids[x.index].push(...x.token_ids);
        if (x.finish_reason !== null) finish[x.index] = x.finish_reason;
      }
    }
    cases.forEach((g, i) => assert.deepEqual(ids[i], g.greedy_ids.slice(0, 24), `prompt ${i}`));
    assert.deepEqual(finish, cases.map(() => 'length'));
    const promptTokens = cases.reduce((sum, g) => sum + g.prompt_ids.length, 0);
    assertUsage(chunks[chunks.length - 1].usage, promptTokens, 24 * cases.length);
  });
});

describe('tiny-llama with LoRA adapters (model picks the adapter)', () => {
  const MODEL = 'tests/data/models/tiny-llama';
  const ADAPTERS = {
    sql: readJson('tests/data/lora/tiny-llama-lora-sql/golden.json').cases,
    poet: readJson('tests/data/lora/tiny-llama-lora-poet/golden.json').cases,
  };
  let server;
  let oai;
  before(async () => {
    server = await startServer(['--config', 'examples/deploy-cpu-lora.yaml']);
    oai = client(server);
  });
  after(async () => {
    await stopAndCheck(server);
  });

  it('lists the base and each adapter with root and parent', CASE, async () => {
    const page = await oai.models.list();
    assert.deepEqual(page.data.map((m) => m.id), [MODEL, 'sql', 'poet']);
    assert.equal(page.data[0].parent, null);
    assert.equal(page.data[1].root, 'tests/data/lora/tiny-llama-lora-sql');
    assert.equal(page.data[1].parent, MODEL);
    assert.equal(page.data[2].parent, MODEL);
  });

  it('concurrent requests mixing both adapters and the base give each its golden ids', CASE, async () => {
    const jobs = [];
    for (const [name, cases] of Object.entries(ADAPTERS)) {
      for (const g of cases) {
        jobs.push({ model: name, prompt: g.prompt_ids, want: g.greedy_ids });
        jobs.push({ model: MODEL, prompt: g.prompt_ids, want: g.base_greedy_ids });
      }
    }
    const results = await Promise.all(jobs.map((j, i) => oai.completions.create({
      model: j.model, prompt: j.prompt, max_tokens: j.want.length, temperature: 0, ignore_eos: true,
      stream: i % 2 === 1,
    }).then(async (r) => {
      if (!(i % 2 === 1)) return { model: r.model, ids: r.choices[0].token_ids };
      const chunks = await collect(r);
      return { model: chunks[0].model, ids: chunks.flatMap((k) => k.choices.flatMap((x) => x.token_ids || [])) };
    })));
    jobs.forEach((j, i) => {
      assert.equal(results[i].model, j.model, `job ${i}`);
      assert.deepEqual(results[i].ids, j.want, `job ${i}: ${j.model}, prompt of ${j.prompt.length} ids`);
    });
  });

  it('an unknown adapter name is NotFoundError 404', CASE, async () => {
    await assert.rejects(
      oai.completions.create({ model: 'sqll', prompt: [1, 2, 3], max_tokens: 2 }),
      (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && /sqll/.test(e.message));
  });
});
