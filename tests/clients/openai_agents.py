"""Uses a running Switchboard gateway the way agent frameworks use the
official OpenAI Python client, and prints what it saw as one JSON object.

Usage: python3 openai_agents.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)

Run by tests/gateway/openai_client.rs, which asserts on the output and on
what the model received: a failed model call raises, plain and streamed; a
streamed turn with text before a tool call, resent as the client
accumulated it, continues the same session; a stream cut part-way and
retried by the gateway shows its text once; a function tool of the
client's own round-trips (finish_reason tool_calls, the result sent back,
the answer); request fields the gateway does not pass on (penalties) are
refused with 400; a
`json_schema` response format, a temperature and a system message reach
the model; and the client's own automatic retries (max_retries=2) after a
504 start no second turn.
"""

import json
import sys

import openai
from openai import OpenAI

MODEL = "fake-model"

# The `json_schema` response format of the structured case.
PICK = {
    "name": "pick",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    },
}


def user(text):
    return {"role": "user", "content": text}


def streamed(client, messages):
    """Streams a completion; returns (X-Session-Id, accumulated text)."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, stream=True
    )
    text = ""
    for chunk in raw.parse():
        for choice in chunk.choices:
            text += choice.delta.content or ""
    return raw.headers.get("x-session-id"), text


def raised(call):
    """Runs `call`; returns what the client raised, if it did."""
    try:
        outcome = call()
        return {"raised": False, "outcome": outcome}
    except openai.APIStatusError as error:
        return {
            "raised": True,
            "error": type(error).__name__,
            "status": error.status_code,
            "code": error.code,
            "session": error.response.headers.get("x-session-id"),
        }
    except openai.APIError as error:
        return {"raised": True, "error": type(error).__name__, "code": error.code}


def main():
    client = OpenAI(base_url=sys.argv[1], api_key="sk-unused", max_retries=0, timeout=60)
    results = {"client_version": openai.__version__}

    results["plain_failure"] = raised(
        lambda: client.chat.completions.create(
            model=MODEL, messages=[user("fail: plain")]
        ).choices[0].message.content
    )
    results["streamed_failure"] = raised(
        lambda: streamed(client, [user("fail: streamed")])[1]
    )

    # The transcript as the client accumulated it from the stream.
    history = [user("compute: 2+2")]
    first_session, reply = streamed(client, history)
    history += [{"role": "assistant", "content": reply}, user("compute: again")]
    second_session, second_reply = streamed(client, history)
    results["resent"] = {
        "first_session": first_session,
        "first_reply": reply,
        "second_session": second_session,
        "second_reply": second_reply,
    }

    results["cut"] = {"text": streamed(client, [user("cut: hello")])[1]}

    # The client's own function tool: the model calls it (beside the
    # gateway's calculator), the client runs it and sends the result back.
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    history = [user("weather: in Paris?")]
    first = client.chat.completions.create(model=MODEL, messages=history, tools=[weather])
    choice = first.choices[0]
    calls = choice.message.tool_calls or []
    history.append(choice.message.model_dump(exclude_none=True))
    for call in calls:
        history.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    second = client.chat.completions.create(model=MODEL, messages=history, tools=[weather])
    results["client_tools"] = {
        "finish": choice.finish_reason,
        "content": choice.message.content,
        "calls": [[call.id, call.function.name, call.function.arguments] for call in calls],
        "answer": second.choices[0].message.content,
        "answer_finish": second.choices[0].finish_reason,
    }

    # Fields the gateway does not pass on are refused, not dropped.
    results["penalty_refused"] = raised(
        lambda: client.chat.completions.create(
            model=MODEL, messages=[user("refused: penalty")], presence_penalty=0.5
        ).choices[0].message.content
    )

    # Structured output, a sampling setting and the client's system message
    # reach the model.
    structured = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Answer as JSON."}, user("structured: pick")],
        response_format={"type": "json_schema", "json_schema": PICK},
        temperature=0.2,
    )
    results["structured"] = json.loads(structured.choices[0].message.content)

    # The client's default automatic retries, no Idempotency-Key.
    retrying = OpenAI(base_url=sys.argv[1], api_key="sk-unused", max_retries=2, timeout=60)
    results["retried"] = raised(
        lambda: retrying.chat.completions.create(
            model=MODEL, messages=[user("slow: take your time")]
        ).choices[0].message.content
    )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
