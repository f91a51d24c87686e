//! Integration tests of the Discord adapter: inbound from recorded
//! MESSAGE_CREATE payloads, outbound over real HTTP against a fake REST API, and the gateway
//! connection against a fake gateway.

mod fake_discord;
mod gateway;
mod inbound;
mod outbound;
mod setup;
mod support;
