// The official OpenAI JavaScript client against `infera serve` (started by
// tests/e2e/test_openai_client.py, which passes INFERA_URL, INFERA_KEY and
// INFERA_MODEL). Run: node --test openai_client.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = process.env.INFERA_URL + '/v1';
const model = process.env.INFERA_MODEL;
const client = new OpenAI({ baseURL, apiKey: process.env.INFERA_KEY, maxRetries: 0, timeout: 120_000 });

test('models list the served model', async () => {
  const list = await client.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  assert.deepEqual(ids, [model]);
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
  assert.equal(one.object, 'model');
});

test('completion, not streamed: shape and usage', async () => {
  const r = await client.completions.create({ model, prompt: 'In the beginning', max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('completion, streamed, equals the non-streamed greedy text; usage chunk at the end', async () => {
  const params = { model, prompt: 'And the LORD said unto Moses', max_tokens: 20, temperature: 0 };
  const whole = await client.completions.create(params);
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 20);
});

test('chat, not streamed and streamed, agree', async () => {
  const messages = [
    { role: 'system', content: 'You answer from the scriptures.' },
    { role: 'user', content: 'Who led the people out of Egypt?' },
  ];
  const r = await client.chat.completions.create({ model, messages, max_completion_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  const msg = r.choices[0].message;
  assert.equal(msg.role, 'assistant');
  assert.equal(typeof msg.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stream: true });
  let text = '';
  let role = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    const c = chunk.choices[0];
    if (c.delta.role) role = c.delta.role;
    if (c.delta.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, msg.content);
  assert.equal(finish, r.choices[0].finish_reason);
});

test('n > 1 gives n choices; a seed makes sampling reproducible', async () => {
  const params = { model, prompt: 'Blessed are', max_tokens: 16, temperature: 1.0, n: 3, seed: 1234 };
  const a = await client.completions.create(params);
  const b = await client.completions.create(params);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.ok(a.usage.completion_tokens > 0 && a.usage.completion_tokens <= 48);
  const other = await client.completions.create({ ...params, seed: 99 });
  assert.notDeepEqual(other.choices.map((c) => c.text), a.choices.map((c) => c.text));
  const chat = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 8, n: 2, seed: 5,
  });
  assert.equal(chat.choices.length, 2);
});

test('stop sequences cut the text and end with finish_reason stop', async () => {
  const base = await client.completions.create({ model, prompt: 'In the beginning', max_tokens: 24, temperature: 0 });
  const text = base.choices[0].text;
  const words = text.trim().split(' ');
  const stop = ' ' + words[2];
  const r = await client.completions.create({ model, prompt: 'In the beginning', max_tokens: 24, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.ok(!r.choices[0].text.includes(stop));
});

test('logprobs: completions and chat', async () => {
  const r = await client.completions.create({ model, prompt: 'The earth', max_tokens: 6, temperature: 0, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 6);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 6; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.equal(Object.keys(lp.top_logprobs[i]).length, 2);
  }
  const c = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = c.choices[0].logprobs.content;
  assert.equal(content.length, c.usage.completion_tokens);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token);  // greedy: the most likely token
    assert.ok(Array.isArray(t.bytes));
  }
});

test('errors arrive as OpenAI error objects with the right status', async () => {
  await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: -1 }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.status, 400);
    assert.equal(e.param, 'max_tokens');
    assert.equal(e.type, 'invalid_request_error');
    return true;
  });
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError);
    assert.equal(e.code, 'model_not_found');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], temperature: -2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
});

test('auth: a wrong key is refused with 401', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError);
    assert.equal(e.status, 401);
    assert.equal(e.code, 'invalid_api_key');
    return true;
  });
  await assert.rejects(bad.completions.create({ model, prompt: 'x', max_tokens: 2 }), OpenAI.AuthenticationError);
});

test('embeddings: base64 (the default of the client, which decodes it) equals float; unit length; errors typed', async () => {
  const input = ['In the beginning God created the heaven and the earth.', 'Jesus wept.'];
  const b64 = await client.embeddings.create({ model, input });
  assert.equal(b64.object, 'list');
  assert.equal(b64.model, model);
  assert.equal(b64.data.length, 2);
  const flt = await client.embeddings.create({ model, input, encoding_format: 'float' });
  for (let i = 0; i < 2; ++i) {
    const a = b64.data[i].embedding, b = flt.data[i].embedding;
    assert.equal(b64.data[i].index, i);
    assert.ok(a.length > 0);
    assert.equal(a.length, b.length);
    let norm = 0;
    for (let j = 0; j < a.length; ++j) {
      assert.ok(Math.abs(a[j] - b[j]) <= 1e-7 * Math.max(1, Math.abs(b[j])), `element ${j}`);
      norm += a[j] * a[j];
    }
    assert.ok(Math.abs(Math.sqrt(norm) - 1) < 1e-5);
  }
  assert.ok(b64.usage.prompt_tokens > 0);
  assert.equal(b64.usage.total_tokens, b64.usage.prompt_tokens);
  const one = await client.embeddings.create({ model, input: input[1], encoding_format: 'float' });
  assert.deepEqual(one.data[0].embedding, flt.data[1].embedding);
  await assert.rejects(client.embeddings.create({ model, input: '' }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.param, 'input');
    return true;
  });
});

test('aborting a stream from the client side', async () => {
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model, prompt: 'In the beginning', max_tokens: 500, ignore_eos: true, stream: true },
    { signal: controller.signal });
  let n = 0;
  try {
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      if (++n === 3) {
        controller.abort();
        break;  // chunks already buffered by the client would otherwise still be iterated
      }
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
  }
  assert.equal(n, 3);
  // The server notices the closed connection and frees the request's KV
  // blocks (checked by test_openai_client.py after this file).
});
