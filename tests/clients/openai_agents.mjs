// Uses a running Switchboard gateway the way agent frameworks use the
// official OpenAI Node client, and prints what it saw as one JSON object (the
// same shape as openai_agents.py prints).
//
// Usage: node openai_agents.mjs BASE_URL   (e.g. http://127.0.0.1:8080/v1)
// The `openai` package is looked up from this folder (.ci/run installs it
// into tests/clients/node_modules).
//
// Run by tests/gateway/openai_client.rs, which asserts on the output.

import OpenAI from "openai";

const MODEL = "fake-model";
const user = (text) => ({ role: "user", content: text });

const client = new OpenAI({
  baseURL: process.argv[2],
  apiKey: "sk-unused",
  maxRetries: 0,
  timeout: 60_000,
});
const results = { client_version: OpenAI.VERSION ?? null };

// Streams a completion; returns [X-Session-Id, accumulated text].
async function streamed(messages) {
  const { data, response } = await client.chat.completions
    .create({ model: MODEL, messages, stream: true })
    .withResponse();
  let text = "";
  for await (const chunk of data) {
    for (const choice of chunk.choices) text += choice.delta.content ?? "";
  }
  return [response.headers.get("x-session-id"), text];
}

// Runs `call`; returns what the client threw, if it did.
async function raised(call) {
  try {
    return { raised: false, outcome: await call() };
  } catch (error) {
    if (!(error instanceof OpenAI.APIError)) throw error;
    return {
      raised: true,
      error: error.constructor.name,
      status: error.status ?? null,
      code: error.code ?? null,
      session: error.headers?.get?.("x-session-id") ?? null,
    };
  }
}

results.plain_failure = await raised(async () => {
  const completion = await client.chat.completions.create({
    model: MODEL,
    messages: [user("fail: plain")],
  });
  return completion.choices[0].message.content;
});
results.streamed_failure = await raised(async () => (await streamed([user("fail: streamed")]))[1]);

// The transcript as the client accumulated it from the stream.
const history = [user("compute: 2+2")];
const [firstSession, reply] = await streamed(history);
history.push({ role: "assistant", content: reply }, user("compute: again"));
const [secondSession, secondReply] = await streamed(history);
results.resent = {
  first_session: firstSession,
  first_reply: reply,
  second_session: secondSession,
  second_reply: secondReply,
};

results.cut = { text: (await streamed([user("cut: hello")]))[1] };

// The client's own function tool: the model calls it (beside the gateway's
// calculator), the client runs it and sends the result back.
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const asked = [user("weather: in Paris?")];
const first = await client.chat.completions.create({ model: MODEL, messages: asked, tools: [weather] });
const choice = first.choices[0];
const calls = choice.message.tool_calls ?? [];
asked.push(choice.message);
for (const call of calls) {
  asked.push({ role: "tool", tool_call_id: call.id, content: "sunny" });
}
const answer = await client.chat.completions.create({ model: MODEL, messages: asked, tools: [weather] });
results.client_tools = {
  finish: choice.finish_reason,
  content: choice.message.content,
  calls: calls.map((call) => [call.id, call.function.name, call.function.arguments]),
  answer: answer.choices[0].message.content,
  answer_finish: answer.choices[0].finish_reason,
};

// Fields the gateway does not pass on are refused, not dropped.
results.penalty_refused = await raised(async () => {
  const completion = await client.chat.completions.create({
    model: MODEL,
    messages: [user("refused: penalty")],
    presence_penalty: 0.5,
  });
  return completion.choices[0].message.content;
});

// Structured output, a sampling setting and the client's system message
// reach the model.
const structured = await client.chat.completions.create({
  model: MODEL,
  messages: [{ role: "system", content: "Answer as JSON." }, user("structured: pick")],
  response_format: {
    type: "json_schema",
    json_schema: {
      name: "pick",
      strict: true,
      schema: {
        type: "object",
        properties: { answer: { type: "string" } },
        required: ["answer"],
        additionalProperties: false,
      },
    },
  },
  temperature: 0.2,
});
results.structured = JSON.parse(structured.choices[0].message.content);

// The client's default automatic retries, no Idempotency-Key.
const retrying = new OpenAI({
  baseURL: process.argv[2],
  apiKey: "sk-unused",
  maxRetries: 2,
  timeout: 60_000,
});
results.retried = await raised(async () => {
  const completion = await retrying.chat.completions.create({
    model: MODEL,
    messages: [user("slow: take your time")],
  });
  return completion.choices[0].message.content;
});

console.log(JSON.stringify(results));
