// OpenAI's Responses API (/v1/responses) with the official OpenAI JavaScript
// client against `infera serve` running Qwen 2.5's chat template (hermes tool
// calls), started by tests/e2e/test_tool_calls.py (INFERA_URL): responses and
// their output_text, streamed events and the stream helper, conversations by
// previous_response_id, stored responses (retrieve, input items, delete),
// function calls and their outputs, structured output, input token counts and
// errors. Greedy text must equal the chat endpoint's for the same
// conversation.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.INFERA_URL + '/v1', apiKey: 'unused', maxRetries: 0,
                            timeout: 120_000 });
const model = 'default';

async function chat(messages, extra = {}) {
  const r = await client.chat.completions.create({ model, messages, temperature: 0, ...extra });
  return r;
}

const weather = { type: 'function', name: 'get_weather', description: 'Current weather in a city', strict: true,
                  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 } },
                                required: ['city'], additionalProperties: false } };

test('a response: output_text, status and usage as the chat endpoint gives them', async () => {
  const r = await client.responses.create({ model, input: 'Say hello.', instructions: 'Be brief.',
                                            max_output_tokens: 10, temperature: 0, metadata: { run: 'e2e' } });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_[0-9a-f]+$/);
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.instructions, 'Be brief.');
  assert.equal(r.max_output_tokens, 10);
  assert.deepEqual(r.metadata, { run: 'e2e' });
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.equal(r.output[0].content[0].type, 'output_text');
  assert.equal(r.usage.output_tokens, 10);
  const c = await chat([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello.' }],
                       { max_tokens: 10 });
  assert.equal(r.output_text, c.choices[0].message.content);  // (output_text: the SDK's join of the texts)
  assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  // Message items with content parts mean the same as the string.
  const items = await client.responses.create({
    model, instructions: 'Be brief.', max_output_tokens: 10, temperature: 0,
    input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hello.' }] }] });
  assert.equal(items.output_text, r.output_text);
  // Ended before the limit (vLLM's stop extra): completed, with completed_at.
  const s = await client.responses.create({ model, input: 'Say hello.', max_output_tokens: 200, temperature: 0,
                                            stop: ['.', '\n'] });
  assert.equal(s.status, 'completed');
  assert.equal(s.incomplete_details, null);
  assert.ok(s.completed_at >= s.created_at);
});

test('streaming: events in order that add up to the unstreamed response', async () => {
  const params = { model, input: 'Tell me about Moses.', max_output_tokens: 12, temperature: 0 };
  const whole = await client.responses.create(params);
  const stream = await client.responses.create({ ...params, stream: true });
  const types = [];
  let text = '';
  let last = -1;
  let final = null;
  for await (const e of stream) {
    types.push(e.type);
    assert.equal(e.sequence_number, last + 1);
    last = e.sequence_number;
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.incomplete' || e.type === 'response.completed') final = e.response;
  }
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
                                       'response.content_part.added']);
  assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done',
                                     'response.output_item.done', 'response.incomplete']);
  assert.equal(text, whole.output_text);
  assert.equal(final.output[0].content[0].text, whole.output_text);
  assert.equal(final.usage.output_tokens, 12);
  // The SDK's stream helper builds the same response from the events (of a
  // completed response: it takes the final object from response.completed).
  const ended = { ...params, max_output_tokens: 200, stop: ['.', '\n'] };
  const helper = client.responses.stream(ended);
  let deltas = '';
  helper.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const done = await helper.finalResponse();
  const unstreamed = await client.responses.create(ended);
  assert.equal(done.status, 'completed');
  assert.equal(done.output[0].content[0].text, unstreamed.output_text);  // (the helper sets no output_text)
  assert.equal(deltas, unstreamed.output_text);
});

test('a conversation by previous_response_id, and the stored response', async () => {
  const first = await client.responses.create({ model, input: 'Who was Moses?', instructions: 'Answer briefly.',
                                                max_output_tokens: 8, temperature: 0 });
  const next = await client.responses.create({ model, input: 'And Aaron?', previous_response_id: first.id,
                                               max_output_tokens: 8, temperature: 0 });
  assert.equal(next.previous_response_id, first.id);
  assert.equal(next.instructions, null);  // instructions are not carried over
  const c = await chat([{ role: 'user', content: 'Who was Moses?' },
                        { role: 'assistant', content: first.output_text },
                        { role: 'user', content: 'And Aaron?' }], { max_tokens: 8 });
  assert.equal(next.output_text, c.choices[0].message.content);
  assert.equal(next.usage.input_tokens, c.usage.prompt_tokens);

  const got = await client.responses.retrieve(first.id);
  assert.deepEqual(got, first);
  const items = await client.responses.inputItems.list(next.id);
  assert.equal(items.data.length, 1);
  assert.equal(items.data[0].type, 'message');
  assert.equal(items.data[0].content[0].text, 'And Aaron?');

  await client.responses.delete(first.id);
  await assert.rejects(client.responses.retrieve(first.id), (e) => e.status === 404);
  // (its follow-up holds the whole conversation and still continues)
  const third = await client.responses.create({ model, input: 'Thanks.', previous_response_id: next.id,
                                                max_output_tokens: 2, temperature: 0 });
  assert.equal(third.usage.output_tokens, 2);
  await assert.rejects(client.responses.create({ model, input: 'x', previous_response_id: first.id }),
                       (e) => e.status === 404 && e.param === 'previous_response_id');
  // store: false keeps nothing.
  const unstored = await client.responses.create({ model, input: 'Hi', store: false, max_output_tokens: 2 });
  assert.equal(unstored.store, false);
  await assert.rejects(client.responses.retrieve(unstored.id), (e) => e.status === 404);
});

test('function calls: a required call, its output back, streamed call events', async () => {
  const r = await client.responses.create({ model, input: 'What is the weather in Paris?', tools: [weather],
                                            tool_choice: 'required', max_output_tokens: 200, temperature: 0 });
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.ok(calls.length >= 1, JSON.stringify(r.output));
  for (const call of calls) {
    assert.equal(call.name, 'get_weather');
    assert.match(call.call_id, /^call_/);
    assert.match(call.id, /^fc_/);
    assert.equal(call.status, 'completed');
    assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  }
  // The tool's output goes back as function_call_output items.
  const follow = await client.responses.create({
    model, previous_response_id: r.id, tools: [weather], max_output_tokens: 6, temperature: 0,
    input: calls.map((call) => ({ type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' })) });
  assert.equal(follow.output[0].type, 'message');
  // The same conversation sent whole, without the store.
  const whole = await client.responses.create({
    model, tools: [weather], max_output_tokens: 6, temperature: 0,
    input: [{ role: 'user', content: 'What is the weather in Paris?' }, ...calls.map(({ id, status, ...c }) => c),
            ...calls.map((call) => ({ type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' }))] });
  assert.equal(whole.output_text, follow.output_text);
  // Streamed: the call's events, and the same call.
  const events = [];
  const stream = client.responses.stream({ model, input: 'What is the weather in Paris?', tools: [weather],
                                           tool_choice: { type: 'function', name: 'get_weather' },
                                           max_output_tokens: 200, temperature: 0 });
  stream.on('event', (e) => events.push(e.type));
  const final = await stream.finalResponse();
  const call = final.output.find((o) => o.type === 'function_call');
  assert.equal(call.name, 'get_weather');
  assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  for (const t of ['response.function_call_arguments.delta', 'response.function_call_arguments.done',
                   'response.output_item.done', 'response.completed']) {
    assert.ok(events.includes(t), `${t} in ${events}`);
  }
});

test('structured output and log-probabilities', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } },
                   required: ['name', 'age'], additionalProperties: false };
  const r = await client.responses.create({ model, input: 'Describe Moses.', max_output_tokens: 60, temperature: 0,
                                            text: { format: { type: 'json_schema', name: 'person', schema,
                                                              strict: true } } });
  const v = JSON.parse(r.output_text);
  assert.deepEqual(Object.keys(v), ['name', 'age']);
  assert.ok(Number.isInteger(v.age));
  const lp = await client.responses.create({ model, input: 'Say hello.', max_output_tokens: 4, temperature: 0,
                                             top_logprobs: 2, include: ['message.output_text.logprobs'] });
  const part = lp.output[0].content[0];
  assert.equal(part.logprobs.length, 4);
  assert.equal(part.logprobs.map((l) => l.token).join(''), part.text);
  for (const l of part.logprobs) {
    assert.ok(l.logprob <= 0);
    assert.equal(l.top_logprobs.length, 2);
  }
});

test('input token counts and errors', async () => {
  const n = await client.responses.inputTokens.count({ model, input: 'Say hello.', instructions: 'Be brief.' });
  assert.equal(n.object, 'response.input_tokens');
  const c = await chat([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello.' }],
                       { max_tokens: 1 });
  assert.equal(n.input_tokens, c.usage.prompt_tokens);
  await assert.rejects(client.responses.create({ model, input: 'x', tools: [{ type: 'web_search' }] }),
                       (e) => e.status === 400 && e.param === 'tools');
  await assert.rejects(client.responses.create({ model, input: 'x', max_output_tokens: -1 }),
                       (e) => e.status === 400 && e.param === 'max_output_tokens');
  await assert.rejects(client.responses.create({ model, input: 'x', background: true }),
                       (e) => e.status === 400 && e.param === 'background');
  await assert.rejects(client.responses.retrieve('resp_nope'), (e) => e.status === 404);
  // The store's size is a metric.
  const metrics = await (await fetch(process.env.INFERA_URL + '/metrics')).text();
  const stored = Number(metrics.match(/^infera_responses_stored (\S+)$/m)[1]);
  assert.ok(stored >= 5, metrics.match(/^infera_responses_stored.*$/m)[0]);
});
