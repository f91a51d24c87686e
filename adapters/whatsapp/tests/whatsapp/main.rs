//! Integration tests: the WhatsApp adapter over real HTTP on 127.0.0.1,
//! against the fake Cloud API of the test-support crate and a recording
//! sink.

mod helpers;
mod inbound;
mod numbers;
mod outbound;
mod redaction;
mod webhook;
