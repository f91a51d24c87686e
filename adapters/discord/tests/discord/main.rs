//! Integration tests of the Discord adapter: inbound from recorded
//! MESSAGE_CREATE payloads, outbound over real HTTP against a fake REST API.

mod fake_discord;
mod inbound;
mod outbound;
mod setup;
mod support;
