//! Integration tests of the Telegram adapter over real HTTP against a fake
//! Bot API. Nothing reaches the internet; nothing sleeps for long.

mod fake;
mod helpers;
mod inbound;
mod outbound;
mod polling;
mod webhook;
