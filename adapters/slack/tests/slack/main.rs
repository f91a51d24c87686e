//! Integration tests: the Slack adapter over real HTTP and WebSockets on
//! 127.0.0.1, against the fake Slack of the test kit and a recording sink.

mod bad_input;
mod events;
mod files;
mod helpers;
mod interactivity;
mod secrets;
mod send;
mod socket;
