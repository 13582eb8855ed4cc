// OpenAI's tool flow with the official JavaScript client against
// `infera serve` running Qwen 2.5's chat template (hermes tool calls),
// started by tests/e2e/test_tool_calls.py (INFERA_URL). The bundled model
// knows no tools, so tool_choice "required" / named makes the constraint
// engine write the calls; the flow around them is what a real app does:
// call -> run the tool -> send a `role: tool` result -> final answer.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.INFERA_URL + '/v1', apiKey: 'unused', maxRetries: 0,
                            timeout: 120_000 });
const model = 'default';

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather in a city',
    parameters: { type: 'object', properties: {
      city: { type: 'string', maxLength: 20 },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'get_time', description: 'Local time in a time zone',
    parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 20 } }, required: ['zone'],
                  additionalProperties: false } } },
];

function checkCall(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.equal(typeof args.city, 'string');
    assert.ok(['celsius', 'fahrenheit'].includes(args.unit), call.function.arguments);
    assert.deepEqual(Object.keys(args).sort(), ['city', 'unit']);
  } else {
    assert.equal(call.function.name, 'get_time');
    assert.deepEqual(Object.keys(args), ['zone']);
  }
  return args;
}

test('required: the reply is tool calls with valid arguments; the tool result comes back', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris, and the time there?' }];
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', seed,
                                                     max_tokens: 200 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.equal(c.message.content, null);
    assert.ok(c.message.tool_calls.length >= 1);
    for (const call of c.message.tool_calls) checkCall(call);
  }
  // The app runs the tool and sends the result: the model answers in text.
  const first = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', seed: 7,
                                                       max_tokens: 200 });
  const assistant = first.choices[0].message;
  const follow = [...messages, assistant,
                  ...assistant.tool_calls.map((t) => ({ role: 'tool', tool_call_id: t.id, content: '{"temp": 21}' }))];
  const answer = await client.chat.completions.create({ model, messages: follow, tools, tool_choice: 'none',
                                                        max_tokens: 12, seed: 1 });
  assert.equal(answer.choices[0].finish_reason, 'length');
  assert.equal(typeof answer.choices[0].message.content, 'string');
  assert.equal(answer.choices[0].message.tool_calls, undefined);
});

test('named tool_choice calls that function, once without parallel_tool_calls', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Time in Oslo?' }], tools, seed: 4, max_tokens: 100,
    tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false });
  const calls = r.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'get_time');
  checkCall(calls[0]);
});

test('streamed tool calls: deltas accumulate to the non-streamed calls', async () => {
  const params = { model, messages: [{ role: 'user', content: 'Weather in Rome?' }], tools, tool_choice: 'required',
                   seed: 5, max_tokens: 200, temperature: 0 };
  const whole = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const calls = [];
  let finish = null;
  let content = '';
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (ch.delta.content) content += ch.delta.content;
    for (const d of ch.delta.tool_calls ?? []) {
      calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      if (d.id) calls[d.index].id = d.id;
      if (d.function?.name) calls[d.index].function.name += d.function.name;
      if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(content, '');
  const want = whole.choices[0].message.tool_calls;
  assert.equal(calls.length, want.length);
  for (let i = 0; i < want.length; ++i) {
    assert.equal(calls[i].function.name, want[i].function.name);
    assert.equal(calls[i].function.arguments, want[i].function.arguments);
    checkCall(calls[i]);
  }
});

test('auto: a reply without a call is plain content; tools reach the prompt', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hello.' }], tools,
                                                   max_tokens: 8, seed: 3 });
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].message.tool_calls, undefined);
  const noTools = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hello.' }],
                                                         max_tokens: 8, seed: 3 });
  assert.ok(r.usage.prompt_tokens > noTools.usage.prompt_tokens + 50, 'the tool signatures are in the prompt');
});

test('bad tools are 400 naming the field', async () => {
  const bad = async (extra, param) => {
    await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
                                                          max_tokens: 2, ...extra }),
                         (e) => e.status === 400 && e.error?.param === param);
  };
  await bad({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice');
  await bad({ tool_choice: 'required' }, 'tool_choice');
  await bad({ tools: [{ type: 'function', function: { name: 'bad name!' } }] }, 'tools');
  await bad({ tools, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice');
});
