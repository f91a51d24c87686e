// Uses a running Switchboard gateway through the Responses API of the
// official OpenAI Node client, unchanged, and prints what it saw as one JSON
// object (the same shape as openai_responses.py prints).
//
// Usage: node openai_responses.mjs BASE_URL   (e.g. http://127.0.0.1:8080/v1)
// The `openai` package is looked up from this folder (.ci/run installs it
// into tests/clients/node_modules).
//
// Run by tests/gateway/openai_client.rs, which asserts on the output.

import OpenAI from "openai";

const MODEL = "fake-model";
const client = new OpenAI({
  baseURL: process.argv[2],
  apiKey: "sk-unused",
  maxRetries: 0,
  timeout: 60_000,
});
const results = { client_version: OpenAI.VERSION ?? null };

// Runs `call`; returns what the client threw, if it did.
async function raised(call) {
  try {
    return { raised: false, outcome: await call() };
  } catch (error) {
    if (!(error instanceof OpenAI.APIError)) throw error;
    return { raised: true, status: error.status ?? null, code: error.code ?? null };
  }
}

// Streams a response; returns [event types, delta text, final response].
async function streamText(params) {
  const types = [];
  let text = "";
  let final = null;
  const stream = await client.responses.create({ model: MODEL, stream: true, ...params });
  for await (const event of stream) {
    if (types.at(-1) !== event.type) types.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.completed") final = event.response;
  }
  return [types, text, final];
}

// The text of a response's output messages.
const outputText = (response) =>
  response.output
    .flatMap((item) => item.content ?? [])
    .map((part) => part.text ?? "")
    .join("");

const first = await client.responses.create({
  model: MODEL,
  input: "my name is Ada",
  instructions: "Be brief.",
});
results.plain = {
  id: first.id,
  object: first.object,
  status: first.status,
  text: first.output_text,
  input_tokens: first.usage.input_tokens,
};
const second = await client.responses.create({
  model: MODEL,
  input: "what is my name?",
  previous_response_id: first.id,
});
results.continued = { text: second.output_text, previous: second.previous_response_id };

const [types, text, final] = await streamText({
  input: [{ role: "user", content: "compute: 2+2" }],
  previous_response_id: second.id,
});
results.streamed = { types, text, final_text: outputText(final) };

results.retrieved = { text: (await client.responses.retrieve(first.id)).output_text };
await client.responses.delete(first.id);
results.deleted = await raised(async () => (await client.responses.retrieve(first.id)).output_text);

results.plain_failure = await raised(
  async () => (await client.responses.create({ model: MODEL, input: "fail: plain" })).output_text,
);
results.streamed_failure = await raised(async () => (await streamText({ input: "fail: streamed" }))[1]);
const tool = {
  type: "function",
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string" } } },
};
const asked = await client.responses.create({ model: MODEL, input: "weather: in Paris?", tools: [tool] });
const calls = asked.output.filter((item) => item.type === "function_call");
const answered = await client.responses.create({
  model: MODEL,
  previous_response_id: asked.id,
  tools: [tool],
  input: calls.map((call) => ({ type: "function_call_output", call_id: call.call_id, output: "sunny" })),
});
results.client_tools = {
  calls: calls.map((call) => [call.call_id, call.name, call.arguments]),
  answer: answered.output_text,
};

console.log(JSON.stringify(results));
