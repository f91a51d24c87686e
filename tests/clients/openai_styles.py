"""Keeps three conversations with the official OpenAI Python client, one in
each style the gateway supports, and prints what it saw as one JSON object.

Usage: python3 openai_styles.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)

Run by tests/gateway/stateless.rs: the X-Session-Id header (read back from
the raw response and sent again), the `user` field, and a plain transcript
resent on every request without either, as chat UIs do. Each conversation is
three turns; the script records the session id of every answer.
"""

import json
import sys

from openai import OpenAI

MODEL = "fake-model"
TURNS = ["my name is Py", "what is my name?", "and again?"]


def main():
    client = OpenAI(base_url=sys.argv[1], api_key="sk-unused", max_retries=0, timeout=60)
    results = {}

    sessions, replies, session = [], [], None
    for text in TURNS:
        headers = {"X-Session-Id": session} if session else {}
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": "header: " + text}],
            extra_headers=headers,
        )
        session = raw.headers.get("x-session-id")
        sessions.append(session)
        replies.append(raw.parse().choices[0].message.content)
    results["header"] = {"sessions": sessions, "replies": replies}

    sessions, replies = [], []
    for text in TURNS:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": "user: " + text}],
            user="py-user",
        )
        sessions.append(raw.headers.get("x-session-id"))
        replies.append(raw.parse().choices[0].message.content)
    results["user"] = {"sessions": sessions, "replies": replies}

    sessions, replies, history = [], [], []
    for text in TURNS:
        history.append({"role": "user", "content": "transcript: " + text})
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=history)
        reply = raw.parse().choices[0].message.content
        history.append({"role": "assistant", "content": reply})
        sessions.append(raw.headers.get("x-session-id"))
        replies.append(reply)
    results["transcript"] = {"sessions": sessions, "replies": replies}

    print(json.dumps(results))


if __name__ == "__main__":
    main()
