"""Talks to a running Switchboard gateway with the official OpenAI Python
client, unchanged, and prints what it saw as one JSON object.

Usage: python3 openai_client.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)

Run by tests/gateway/openai_client.rs, which asserts on the output:
a plain completion, a streamed one (its deltas), a streamed one with a tool
round (its text, tool events and usage), an image_url content part, a
conversation continued
with the X-Session-Id header (read back from the raw response), an unknown
session id that cannot name a new session (the client's error type), and the
model list.
"""

import json
import sys

import openai
from openai import OpenAI

MODEL = "fake-model"
# A 1×1 PNG.
PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="


def user(text):
    return [{"role": "user", "content": text}]


def main():
    client = OpenAI(base_url=sys.argv[1], api_key="sk-unused", max_retries=0, timeout=60)
    results = {"client_version": openai.__version__}

    plain = client.chat.completions.create(model=MODEL, messages=user("hello from python"))
    results["plain"] = {
        "id": plain.id,
        "object": plain.object,
        "model": plain.model,
        "role": plain.choices[0].message.role,
        "content": plain.choices[0].message.content,
        "finish_reason": plain.choices[0].finish_reason,
        "prompt_tokens": plain.usage.prompt_tokens,
        "completion_tokens": plain.usage.completion_tokens,
        "total_tokens": plain.usage.total_tokens,
    }

    stream = client.chat.completions.create(
        model=MODEL, messages=user("stream it please"), stream=True
    )
    deltas, roles, finish, ids = [], [], None, set()
    for chunk in stream:
        ids.add(chunk.id)
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                deltas.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    results["stream"] = {
        "deltas": deltas,
        "text": "".join(deltas),
        "roles": roles,
        "finish_reason": finish,
        "ids": len(ids),
    }

    # A streamed turn with a tool round: the tool activity arrives as chunks
    # with an empty delta and a `switchboard` field, the usage chunk last.
    tool_stream = client.chat.completions.create(
        model=MODEL,
        messages=user("calculate: 6*7"),
        stream=True,
        stream_options={"include_usage": True},
    )
    tool_deltas, tool_events, tool_finish, usage = [], [], None, None
    for chunk in tool_stream:
        extra = (chunk.model_extra or {}).get("switchboard")
        if extra:
            tool_events.append(extra)
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                tool_deltas.append(choice.delta.content)
            if choice.delta.tool_calls:
                tool_events.append({"client_tool_calls": True})
            if choice.finish_reason:
                tool_finish = choice.finish_reason
    results["stream_tools"] = {
        "deltas": len(tool_deltas),
        "text": "".join(tool_deltas),
        "events": tool_events,
        "finish_reason": tool_finish,
        "prompt_tokens": usage.prompt_tokens if usage else None,
        "completion_tokens": usage.completion_tokens if usage else None,
    }

    # An image as an image_url content part (a 1×1 PNG in a data: URL).
    picture = client.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is in this picture?"},
                    {"type": "image_url", "image_url": {"url": PIXEL, "detail": "low"}},
                ],
            }
        ],
    )
    results["image"] = {"content": picture.choices[0].message.content}

    first = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("my name is Py")
    )
    session = first.headers.get("x-session-id")
    second = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=user("what is my name?"),
        extra_headers={"X-Session-Id": session},
    )
    results["session"] = {
        "first": session,
        "first_reply": first.parse().choices[0].message.content,
        "second": second.headers.get("x-session-id"),
        "second_reply": second.parse().choices[0].message.content,
    }

    try:
        client.chat.completions.create(
            model=MODEL,
            messages=user("anyone there?"),
            extra_headers={"X-Session-Id": "no/such/session"},
        )
        results["unknown_session"] = {"error": None}
    except openai.APIStatusError as error:
        results["unknown_session"] = {
            "error": type(error).__name__,
            "status": error.status_code,
            "message": error.message,
        }

    results["models"] = [model.id for model in client.models.list()]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
