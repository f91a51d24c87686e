// Keeps three conversations with the official OpenAI Node client, one in
// each style the gateway supports, and prints what it saw as one JSON object
// (the same shape as openai_styles.py prints).
//
// Usage: node openai_styles.mjs BASE_URL   (e.g. http://127.0.0.1:8080/v1)
//
// Run by tests/gateway/stateless.rs: the X-Session-Id header (read back from
// the raw response and sent again), the `user` field, and a plain transcript
// resent on every request without either, as chat UIs do. Each conversation
// is three turns; the script records the session id of every answer.

import OpenAI from "openai";

const MODEL = "fake-model";
const TURNS = ["my name is Node", "what is my name?", "and again?"];

const client = new OpenAI({
  baseURL: process.argv[2],
  apiKey: "sk-unused",
  maxRetries: 0,
  timeout: 60_000,
});
const results = {};

// Sends one request; returns the reply text and the session it went to.
async function ask(body, options = {}) {
  const { data, response } = await client.chat.completions
    .create({ model: MODEL, ...body }, options)
    .withResponse();
  return {
    reply: data.choices[0].message.content,
    session: response.headers.get("x-session-id"),
  };
}

{
  const sessions = [];
  const replies = [];
  let session = null;
  for (const text of TURNS) {
    const options = session ? { headers: { "X-Session-Id": session } } : {};
    const answer = await ask(
      { messages: [{ role: "user", content: `header: ${text}` }] },
      options,
    );
    session = answer.session;
    sessions.push(answer.session);
    replies.push(answer.reply);
  }
  results.header = { sessions, replies };
}

{
  const sessions = [];
  const replies = [];
  for (const text of TURNS) {
    const answer = await ask({
      messages: [{ role: "user", content: `user: ${text}` }],
      user: "node-user",
    });
    sessions.push(answer.session);
    replies.push(answer.reply);
  }
  results.user = { sessions, replies };
}

{
  const sessions = [];
  const replies = [];
  const history = [];
  for (const text of TURNS) {
    history.push({ role: "user", content: `transcript: ${text}` });
    const answer = await ask({ messages: history });
    history.push({ role: "assistant", content: answer.reply });
    sessions.push(answer.session);
    replies.push(answer.reply);
  }
  results.transcript = { sessions, replies };
}

console.log(JSON.stringify(results));
