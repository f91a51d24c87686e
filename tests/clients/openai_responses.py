"""Uses a running Switchboard gateway through the Responses API of the
official OpenAI Python client, unchanged, and prints what it saw as one
JSON object.

Usage: python3 openai_responses.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)

Run by tests/gateway/openai_client.rs, which asserts on the output and on
what the model received: a plain response, one continued with
previous_response_id, a streamed one (its event types and text), reading one
back and deleting it, a failed model call raising (plain and streamed), and
a function tool of the client's own: its call handed out, its output sent
back with previous_response_id, the answer.
"""

import json
import sys

import openai
from openai import OpenAI

MODEL = "fake-model"


def raised(call):
    """Runs `call`; returns what the client raised, if it did."""
    try:
        return {"raised": False, "outcome": call()}
    except openai.APIStatusError as error:
        return {"raised": True, "status": error.status_code, "code": error.code}
    except openai.APIError as error:
        return {"raised": True, "error": type(error).__name__, "code": error.code}


def stream_text(client, **kwargs):
    """Streams a response; returns (event types, delta text, final response)."""
    types, text, final = [], "", None
    for event in client.responses.create(model=MODEL, stream=True, **kwargs):
        if not types or types[-1] != event.type:
            types.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type == "response.completed":
            final = event.response
    return types, text, final


def main():
    client = OpenAI(base_url=sys.argv[1], api_key="sk-unused", max_retries=0, timeout=60)
    results = {"client_version": openai.__version__}

    first = client.responses.create(model=MODEL, input="my name is Ada", instructions="Be brief.")
    results["plain"] = {
        "id": first.id,
        "object": first.object,
        "status": first.status,
        "text": first.output_text,
        "input_tokens": first.usage.input_tokens,
    }
    second = client.responses.create(
        model=MODEL, input="what is my name?", previous_response_id=first.id
    )
    results["continued"] = {"text": second.output_text, "previous": second.previous_response_id}

    types, text, final = stream_text(
        client, input=[{"role": "user", "content": "compute: 2+2"}], previous_response_id=second.id
    )
    results["streamed"] = {"types": types, "text": text, "final_text": final.output_text}

    results["retrieved"] = {"text": client.responses.retrieve(first.id).output_text}
    client.responses.delete(first.id)
    results["deleted"] = raised(lambda: client.responses.retrieve(first.id).output_text)

    results["plain_failure"] = raised(
        lambda: client.responses.create(model=MODEL, input="fail: plain").output_text
    )
    results["streamed_failure"] = raised(lambda: stream_text(client, input="fail: streamed")[1])
    tool = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    first = client.responses.create(model=MODEL, input="weather: in Paris?", tools=[tool])
    calls = [item for item in first.output if item.type == "function_call"]
    outputs = [
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        for call in calls
    ]
    second = client.responses.create(
        model=MODEL, input=outputs, previous_response_id=first.id, tools=[tool]
    )
    results["client_tools"] = {
        "calls": [[call.call_id, call.name, call.arguments] for call in calls],
        "answer": second.output_text,
    }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
