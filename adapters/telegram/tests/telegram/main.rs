//! Integration tests of the Telegram adapter over real HTTP against the
//! shared fake Bot API. Nothing reaches the internet; nothing sleeps.

mod buttons;
mod helpers;
mod inbound;
mod lifecycle;
mod malformed;
mod outbound;
mod polling;
mod webhook;
