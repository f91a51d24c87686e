// Talks to a running Switchboard gateway with the official OpenAI Node client,
// unchanged, and prints what it saw as one JSON object (the same shape as
// openai_client.py prints).
//
// Usage: node openai_client.mjs BASE_URL   (e.g. http://127.0.0.1:8080/v1)
// The `openai` package is looked up from this folder (.ci/run installs it
// into tests/clients/node_modules).
//
// Run by tests/gateway/openai_client.rs, which asserts on the output.

import OpenAI from "openai";

const MODEL = "fake-model";
// A 1×1 PNG.
const PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==";
const user = (text) => [{ role: "user", content: text }];

const client = new OpenAI({
  baseURL: process.argv[2],
  apiKey: "sk-unused",
  maxRetries: 0,
  timeout: 60_000,
});
const results = {};

const plain = await client.chat.completions.create({
  model: MODEL,
  messages: user("hello from node"),
});
results.plain = {
  id: plain.id,
  object: plain.object,
  model: plain.model,
  role: plain.choices[0].message.role,
  content: plain.choices[0].message.content,
  finish_reason: plain.choices[0].finish_reason,
  prompt_tokens: plain.usage.prompt_tokens,
  completion_tokens: plain.usage.completion_tokens,
  total_tokens: plain.usage.total_tokens,
};

const stream = await client.chat.completions.create({
  model: MODEL,
  messages: user("stream it please"),
  stream: true,
});
const deltas = [];
const roles = [];
const ids = new Set();
let finish = null;
for await (const chunk of stream) {
  ids.add(chunk.id);
  for (const choice of chunk.choices) {
    if (choice.delta.role) roles.push(choice.delta.role);
    if (choice.delta.content) deltas.push(choice.delta.content);
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
results.stream = {
  deltas,
  text: deltas.join(""),
  roles,
  finish_reason: finish,
  ids: ids.size,
};

// A streamed turn with a tool round: the tool activity arrives as chunks with
// an empty delta and a `switchboard` field, the usage chunk last.
const toolStream = await client.chat.completions.create({
  model: MODEL,
  messages: user("calculate: 6*7"),
  stream: true,
  stream_options: { include_usage: true },
});
const toolDeltas = [];
const toolEvents = [];
let toolFinish = null;
let usage = null;
for await (const chunk of toolStream) {
  if (chunk.switchboard) toolEvents.push(chunk.switchboard);
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    if (choice.delta.content) toolDeltas.push(choice.delta.content);
    if (choice.delta.tool_calls) toolEvents.push({ client_tool_calls: true });
    if (choice.finish_reason) toolFinish = choice.finish_reason;
  }
}
results.stream_tools = {
  deltas: toolDeltas.length,
  text: toolDeltas.join(""),
  events: toolEvents,
  finish_reason: toolFinish,
  prompt_tokens: usage?.prompt_tokens ?? null,
  completion_tokens: usage?.completion_tokens ?? null,
};

// An image as an image_url content part (a 1×1 PNG in a data: URL).
const picture = await client.chat.completions.create({
  model: MODEL,
  messages: [
    {
      role: "user",
      content: [
        { type: "text", text: "what is in this picture?" },
        { type: "image_url", image_url: { url: PIXEL, detail: "low" } },
      ],
    },
  ],
});
results.image = { content: picture.choices[0].message.content };

const first = await client.chat.completions
  .create({ model: MODEL, messages: user("my name is Py") })
  .withResponse();
const session = first.response.headers.get("x-session-id");
const second = await client.chat.completions
  .create(
    { model: MODEL, messages: user("what is my name?") },
    { headers: { "X-Session-Id": session } },
  )
  .withResponse();
results.session = {
  first: session,
  first_reply: first.data.choices[0].message.content,
  second: second.response.headers.get("x-session-id"),
  second_reply: second.data.choices[0].message.content,
};

try {
  await client.chat.completions.create(
    { model: MODEL, messages: user("anyone there?") },
    { headers: { "X-Session-Id": "no/such/session" } },
  );
  results.unknown_session = { error: null };
} catch (error) {
  if (!(error instanceof OpenAI.APIError)) throw error;
  results.unknown_session = {
    error: error.constructor.name,
    status: error.status,
    message: error.message,
  };
}

const models = [];
for await (const model of client.models.list()) models.push(model.id);
results.models = models;

console.log(JSON.stringify(results));
