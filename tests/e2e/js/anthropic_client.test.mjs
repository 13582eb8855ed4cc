// Anthropic's Messages API (/v1/messages) with the official Anthropic
// TypeScript SDK against `infera serve` running Qwen 2.5's chat template
// (hermes tool calls), started by tests/e2e/test_tool_calls.py (INFERA_URL):
// messages, streaming events, stop sequences, tool use and its round trip,
// count_tokens, and errors in Anthropic's shape. The text must equal the
// OpenAI chat endpoint's for the same conversation (greedy).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';

const client = new Anthropic({ baseURL: process.env.INFERA_URL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const model = 'default';

async function openaiChat(body) {
  const r = await fetch(process.env.INFERA_URL + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model, ...body }) });
  assert.equal(r.status, 200);
  return r.json();
}

const tools = [{ name: 'get_weather', description: 'Current weather in a city',
                 input_schema: { type: 'object', properties: {
                   city: { type: 'string', maxLength: 20 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
                   required: ['city', 'unit'], additionalProperties: false } }];

test('a message: text, stop reasons and usage as the OpenAI chat endpoint gives them', async () => {
  const messages = [{ role: 'user', content: 'Say hello.' }];
  const r = await client.messages.create({ model, max_tokens: 10, system: 'Be brief.', messages, temperature: 0 });
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.match(r.id, /^msg/);
  assert.equal(r.content.length, 1);
  assert.equal(r.content[0].type, 'text');
  assert.equal(r.stop_reason, 'max_tokens');
  assert.equal(r.stop_sequence, null);
  assert.equal(r.usage.output_tokens, 10);
  const o = await openaiChat({ messages: [{ role: 'system', content: 'Be brief.' }, ...messages], max_tokens: 10,
                               temperature: 0 });
  assert.equal(r.content[0].text, o.choices[0].message.content);
  assert.equal(r.usage.input_tokens, o.usage.prompt_tokens);
  // A stop sequence: the text before it, and which one.
  const word = r.content[0].text.trim().split(/\s+/)[1];
  const s = await client.messages.create({ model, max_tokens: 10, system: 'Be brief.', messages, temperature: 0,
                                           stop_sequences: ['zzz', word] });
  assert.equal(s.stop_reason, 'stop_sequence');
  assert.equal(s.stop_sequence, word);
  assert.ok(r.content[0].text.startsWith(s.content[0].text + word));
  // Content blocks and a system given as blocks mean the same.
  const b = await client.messages.create({ model, max_tokens: 10, temperature: 0,
                                           system: [{ type: 'text', text: 'Be brief.' }],
                                           messages: [{ role: 'user', content: [{ type: 'text', text: 'Say hello.' }] }] });
  assert.equal(b.content[0].text, r.content[0].text);
});

test('streaming: Anthropic events that add up to the unstreamed message', async () => {
  const params = { model, max_tokens: 12, messages: [{ role: 'user', content: 'Tell me about Moses.' }],
                   temperature: 0 };
  const whole = await client.messages.create(params);
  const events = [];
  const stream = client.messages.stream(params);
  stream.on('streamEvent', (e) => events.push(e.type));
  const final = await stream.finalMessage();
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, 12);
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  assert.equal(events.at(-2), 'message_delta');
  assert.ok(events.includes('content_block_start') && events.includes('content_block_stop'));
});

test('tool use: any forces a call with valid input; the tool result comes back', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const r = await client.messages.create({ model, max_tokens: 200, messages, tools, tool_choice: { type: 'any' },
                                           temperature: 0 });
  assert.equal(r.stop_reason, 'tool_use');
  const uses = r.content.filter((b) => b.type === 'tool_use');
  assert.ok(uses.length >= 1, JSON.stringify(r.content));
  for (const u of uses) {
    assert.equal(u.name, 'get_weather');
    assert.equal(typeof u.input.city, 'string');
    assert.ok(['celsius', 'fahrenheit'].includes(u.input.unit));
  }
  // Streamed: the same calls, their input as input_json_delta.
  const final = await client.messages.stream({ model, max_tokens: 200, messages, tools, tool_choice: { type: 'any' },
                                               temperature: 0 }).finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  assert.deepEqual(final.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]),
                   uses.map((b) => [b.name, b.input]));
  // The app runs the tool and answers with a tool_result: the model replies in text.
  const follow = [...messages, { role: 'assistant', content: r.content },
                  { role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id,
                                                               content: '{"temp": 21}' })) }];
  const answer = await client.messages.create({ model, max_tokens: 8, messages: follow, tools,
                                                tool_choice: { type: 'none' }, temperature: 0 });
  assert.equal(answer.stop_reason, 'max_tokens');
  assert.equal(answer.content[0].type, 'text');
  // A named tool, one call.
  const named = await client.messages.create({ model, max_tokens: 200, messages, tools, temperature: 0,
                                               tool_choice: { type: 'tool', name: 'get_weather',
                                                              disable_parallel_tool_use: true } });
  assert.equal(named.content.filter((b) => b.type === 'tool_use').length, 1);
});

test('count_tokens equals the input tokens of the message', async () => {
  const params = { model, system: 'Be brief.', messages: [{ role: 'user', content: 'Say hello.' }], tools };
  const c = await client.messages.countTokens(params);
  const r = await client.messages.create({ ...params, max_tokens: 1 });
  assert.equal(c.input_tokens, r.usage.input_tokens);
});

test('errors come in Anthropic shape with the right status', async () => {
  await assert.rejects(client.messages.create({ model, messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e.status === 400 && e.error?.type === 'error' &&
                              e.error?.error?.type === 'invalid_request_error' && /max_tokens/.test(e.message));
  await assert.rejects(client.messages.create({ model: 'claude-x', max_tokens: 4,
                                                messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e.status === 404 && e.error?.error?.type === 'not_found_error');
  await assert.rejects(client.messages.create({ model, max_tokens: 4, thinking: { type: 'enabled', budget_tokens: 1024 },
                                                messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e.status === 400 && /thinking/.test(e.message));
});
