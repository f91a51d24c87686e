//! The tests every wire format must pass, written once and run for each
//! (`conformance::openai::…`, `conformance::anthropic::…`) against the fake
//! model server: rate limits and server errors retried with the same
//! bytes, rejections not, the last error kept once retries are spent, slow
//! servers timed out, no key in any error; the tool answer parsed field by
//! field, streamed or not, its stream cut anywhere; a streamed call asking
//! for a stream after the same messages, retried midway with its text
//! restarted, read whole from a server that ignores `stream`. What each
//! format answers is its [`Fixture`]; what is its own alone (the request
//! bytes, fallbacks, malformed streams) is tested beside it.

use std::mem::discriminant;
use std::time::Duration;

use switchboard_test_support::model::{Canned, FakeLlm};

use super::test_support::{
    Fixture, Heard, KEY, ask, ask_streamed, base_url, closed_port, decode, fast_retry, parse,
    provider_at, request, start,
};
use super::{LlmError, ModelResponse, StreamEvent};

/// Whether `error` is of `expected`'s kind, with its status.
fn same_kind(error: &LlmError, expected: &LlmError) -> bool {
    discriminant(error) == discriminant(expected) && error.status() == expected.status()
}

/// A 429 asking for no wait is retried at once, and the retry sends the
/// very same bytes.
async fn a_rate_limit_with_retry_after_zero_is_retried<F: Fixture>() {
    let limited = Canned::json(429, F::failures().rate_limited).header("retry-after", "0");
    let (server, provider) = start::<F>(vec![limited, Canned::json(200, F::ok_body())]).await;
    let response = ask::<F>(provider.as_ref()).await.expect("success");
    assert_eq!(response.content.as_deref(), Some("hi"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
}

/// Two transient failures in a row are retried until the success.
async fn transient_failures_are_retried<F: Fixture>() {
    let [first, second] = F::failures().transient;
    let (server, provider) = start::<F>(vec![first, second, Canned::json(200, F::ok_body())]).await;
    ask::<F>(provider.as_ref()).await.expect("success");
    assert_eq!(server.requests().len(), 3);
}

/// A 400 fails at once with the provider's message.
async fn a_bad_request_is_not_retried<F: Fixture>() {
    let (body, message) = F::failures().bad_request;
    let replies = vec![Canned::json(400, body), Canned::json(200, F::ok_body())];
    let (server, provider) = start::<F>(replies).await;
    let error = ask::<F>(provider.as_ref()).await.expect_err("rejected");
    assert_eq!(
        error,
        LlmError::Rejected {
            status: 400,
            message: message.to_owned()
        }
    );
    assert_eq!(server.requests().len(), 1);
}

/// Four transient failures spend the three retries; the error is the last
/// one.
async fn exhausted_retries_return_the_last_error<F: Fixture>() {
    let (replies, last) = F::failures().exhausted;
    let (server, provider) = start::<F>(replies).await;
    let error = ask::<F>(provider.as_ref()).await.expect_err("exhausted");
    assert_eq!(error, last);
    assert_eq!(server.requests().len(), 4);
}

/// A server slower than the timeout is a [`LlmError::Timeout`].
async fn a_slow_server_times_out<F: Fixture>() {
    let slow = Canned::json(200, F::ok_body()).delayed(Duration::from_secs(2));
    let server = FakeLlm::scripted([slow]).await;
    let provider = provider_at::<F>(
        &base_url::<F>(&server),
        fast_retry(0),
        Duration::from_millis(200),
    );
    let error = ask::<F>(provider.as_ref()).await.expect_err("timeout");
    assert_eq!(error, LlmError::Timeout);
}

/// A 200 whose body is no response is an [`LlmError::InvalidResponse`]
/// (showing what the body said, where it said something).
async fn bodies_that_are_no_response_are_invalid_responses<F: Fixture>() {
    let invalid = F::failures().invalid;
    let replies = invalid.iter().map(|(body, _)| Canned::json(200, *body));
    let (_server, provider) = start::<F>(replies.collect()).await;
    for (body, shown) in invalid {
        let error = ask::<F>(provider.as_ref()).await.expect_err("invalid");
        assert!(
            matches!(error, LlmError::InvalidResponse(ref message)
                if shown.is_none_or(|shown| message.contains(shown))),
            "{body}: {error:?}"
        );
    }
}

/// Failing calls against answers quoting the key, then a call to an
/// unreachable URL that itself contains the key: no error shows it.
async fn api_key_never_leaks_into_errors<F: Fixture>() {
    let (replies, expected) = F::failures().leaking;
    let (_server, provider) = start::<F>(replies).await;
    let mut errors = Vec::new();
    for _ in &expected {
        errors.push(ask::<F>(provider.as_ref()).await.expect_err("fails"));
    }
    let port = closed_port().await;
    let unreachable = provider_at::<F>(
        &format!("http://127.0.0.1:{port}/{KEY}{}", F::BASE_PATH),
        fast_retry(0),
        Duration::from_secs(5),
    );
    let error = ask::<F>(unreachable.as_ref()).await;
    errors.push(error.expect_err("unreachable"));
    for (error, expected) in errors.iter().zip(&expected) {
        assert!(same_kind(error, expected), "{error:?}, not {expected:?}");
    }
    assert!(matches!(errors.last(), Some(LlmError::Network(_))));
    for error in &errors {
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(KEY), "{shown}");
    }
}

/// The tool answer, unstreamed, is read field by field.
async fn response_is_parsed_field_by_field<F: Fixture>() {
    let (name, value) = F::ANSWER_ID;
    let answer = Canned::json(200, F::tool_body("Let me check.")).header(name, value);
    let (_server, provider) = start::<F>(vec![answer]).await;
    let response = ask::<F>(provider.as_ref()).await.expect("success");
    assert_eq!(
        response,
        // The streamed fixture's answer, with an unaccented text.
        ModelResponse {
            content: Some("Let me check.".to_owned()),
            ..F::tool_response()
        }
    );
}

/// The tool answer parses the same whether streamed or not.
fn the_same_answer_parses_alike_streamed_or_not<F: Fixture>() {
    let parsed = parse::<F>(&F::tool_body("Let me chéck.")).expect("parses");
    assert_eq!(
        parsed,
        decode::<F>(&F::tool_stream(), 7).0.expect("decodes")
    );
    assert_eq!(parsed, F::tool_response());
}

/// The tool stream decoded cut one byte at a time (every boundary) and at
/// other sizes (events and characters cut at every offset among them)
/// always gives the tool answer, and passes its text on.
fn a_stream_cut_anywhere_gives_the_unstreamed_response<F: Fixture>() {
    let body = F::tool_stream();
    for step in (1..=32).chain([64, 127, 512, body.len()]) {
        let (response, passed_on) = decode::<F>(&body, step);
        assert_eq!(response, Ok(F::tool_response()), "cut every {step} bytes");
        assert_eq!(passed_on, "Let me chéck.");
    }
}

/// A streamed call sends the plain call's body plus the stream fields,
/// asks for an event stream, and returns what the plain call would.
async fn a_streamed_call_asks_for_a_stream_after_the_same_messages<F: Fixture>() {
    let (name, value) = F::ANSWER_ID;
    let replies = vec![
        Canned::json(200, F::ok_body()),
        Canned::sse(F::tool_stream()).header(name, value),
    ];
    let (server, provider) = start::<F>(replies).await;
    let (messages, tools) = (F::history(), F::tools());
    let request = request::<F>(&messages, &tools);
    provider.complete(&request).await.expect("plain");
    let heard = Heard::default();
    let on = |event: StreamEvent<'_>| heard.on(event);
    let response = provider.stream(&request, &on).await.expect("streamed");
    assert_eq!(response, F::tool_response());
    assert_eq!(heard.text(), "Let me chéck.");
    let requests = server.requests();
    let (plain, streamed) = (&requests[0].body, &requests[1].body);
    let open = plain.strip_suffix('}').expect("object");
    assert_eq!(
        *streamed,
        format!("{open}{}}}", F::STREAM_FIELDS),
        "the streamed request is the plain one plus the stream fields"
    );
    let accept = requests[1].header("accept");
    assert_eq!(accept.as_deref(), Some("text/event-stream"));
}

/// A streamed call that fails is retried with the same bytes; a failure
/// before any text is invisible, one after it is heard as a restart.
async fn a_stream_that_fails_midway_is_retried_and_its_text_restarted<F: Fixture>() {
    let (name, value) = F::ANSWER_ID;
    let (mut replies, expected) = F::failures().midway;
    let failures = replies.len();
    replies.push(Canned::sse(F::tool_stream()).header(name, value));
    let (server, provider) = start::<F>(replies).await;
    let (response, heard) = ask_streamed::<F>(provider.as_ref()).await;
    assert_eq!(response.expect("streamed"), F::tool_response());
    assert_eq!(heard, expected);
    let requests = server.requests();
    assert_eq!(requests.len(), failures + 1);
    assert_eq!(requests[0].body, requests[failures].body);
}

/// A server that answers a streamed call with one JSON body is read whole,
/// its text passed on at once.
async fn a_server_that_ignores_stream_is_read_whole<F: Fixture>() {
    let (_server, provider) = start::<F>(vec![Canned::json(200, F::ok_body())]).await;
    let (response, heard) = ask_streamed::<F>(provider.as_ref()).await;
    assert_eq!(response.expect("read whole").content.as_deref(), Some("hi"));
    assert_eq!(heard, "hi");
}

/// A streamed call's rejection does not show the key it quotes.
async fn stream_errors_never_show_the_key<F: Fixture>() {
    let body = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#);
    let (_server, provider) = start::<F>(vec![Canned::json(401, body)]).await;
    let (response, _) = ask_streamed::<F>(provider.as_ref()).await;
    let error = response.expect_err("rejected");
    assert!(matches!(error, LlmError::Rejected { status: 401, .. }));
    assert!(!format!("{error} {error:?}").contains(KEY));
}

/// The scenarios above as tests of one wire format, each a test of the
/// same name.
macro_rules! scenarios {
    ($wire:ty; async: $($async:ident),+; sync: $($sync:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $async() {
                super::$async::<$wire>().await;
            }
        )+
        $(
            #[test]
            fn $sync() {
                super::$sync::<$wire>();
            }
        )+
    };
}

/// The scenarios as tests of each wire format, in a module of its own.
macro_rules! conformance {
    ($($format:ident: $wire:ty),+ $(,)?) => {$(
        mod $format {
            scenarios!($wire;
                async: a_rate_limit_with_retry_after_zero_is_retried,
                    transient_failures_are_retried,
                    a_bad_request_is_not_retried,
                    exhausted_retries_return_the_last_error,
                    a_slow_server_times_out,
                    bodies_that_are_no_response_are_invalid_responses,
                    api_key_never_leaks_into_errors,
                    response_is_parsed_field_by_field,
                    a_streamed_call_asks_for_a_stream_after_the_same_messages,
                    a_stream_that_fails_midway_is_retried_and_its_text_restarted,
                    a_server_that_ignores_stream_is_read_whole,
                    stream_errors_never_show_the_key;
                sync: the_same_answer_parses_alike_streamed_or_not,
                    a_stream_cut_anywhere_gives_the_unstreamed_response,
            );
        }
    )+};
}

conformance!(
    openai: crate::llm::openai::OpenAi,
    anthropic: crate::llm::anthropic::Anthropic,
);
