//! Integration tests: the Feishu adapter over real HTTP, against a fake
//! Feishu open API and a recording sink.

mod buttons;
mod helpers;
mod lifecycle;
mod send;
mod webhook;
