//! Integration tests of the Discord adapter: inbound from recorded
//! MESSAGE_CREATE payloads, outbound over real HTTP against a fake REST API, and the gateway
//! connection against a fake gateway.

mod buttons;
mod gateway;
mod inbound;
mod lifecycle;
mod outbound;
mod setup;
mod support;

/// The fake Discord (REST API, CDN and gateway) lives in the test kit, where
/// the gateway's own tests use it too.
use switchboard_test_support::discord as fake_discord;
