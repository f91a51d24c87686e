//! What a call costs: the token counts the fake model reports as `usage`.
//!
//! A [`Billing`] computes the [`Usage`] of each answered request from the
//! request itself; the wire format's renderer then writes it in its own
//! fields ([`Usage::openai`], [`Usage::anthropic`]). [`Flat`], the default,
//! reports fixed counts (or, counting, prompt tokens in proportion to the
//! request's size).
//!
//! [`super::Caching`] is the billing model that caches like the providers
//! do; the server asks the billing once per answered request.

use serde_json::{Value, json};

/// The wire format a request came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
}

/// A request to bill.
#[derive(Debug, Clone, Copy)]
pub struct Billed<'a> {
    pub format: Format,
    /// The body exactly as sent.
    pub body: &'a str,
    /// The body, parsed (`null` when it is not JSON).
    pub request: &'a Value,
}

/// The tokens of one call, whatever the wire format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Every input token, cached ones included.
    pub prompt_tokens: u64,
    /// Input tokens read from the cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the cache.
    pub cache_write_tokens: u64,
    /// Of those, the ones written for an hour (Anthropic's `"ttl": "1h"`).
    pub cache_write_1h_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    /// OpenAI's `usage` object (`prompt_tokens` counts cached tokens).
    pub fn openai(&self) -> Value {
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": self.output_tokens,
               "total_tokens": self.prompt_tokens + self.output_tokens,
               "prompt_tokens_details": {"cached_tokens": self.cache_read_tokens}})
    }

    /// Anthropic's `usage` object (`input_tokens` leaves cached ones out).
    pub fn anthropic(&self) -> Value {
        self.anthropic_with_output(self.output_tokens)
    }

    /// The `usage` of a stream's `message_start`: the input counts, and the
    /// first output token.
    pub fn anthropic_start(&self) -> Value {
        self.anthropic_with_output(1)
    }

    fn anthropic_with_output(&self, output_tokens: u64) -> Value {
        let uncached = self
            .prompt_tokens
            .saturating_sub(self.cache_read_tokens)
            .saturating_sub(self.cache_write_tokens);
        let written_5m = self.cache_write_tokens - self.cache_write_1h_tokens;
        json!({"input_tokens": uncached, "output_tokens": output_tokens,
               "cache_read_input_tokens": self.cache_read_tokens,
               "cache_creation_input_tokens": self.cache_write_tokens,
               "cache_creation": {"ephemeral_5m_input_tokens": written_5m,
                                  "ephemeral_1h_input_tokens": self.cache_write_1h_tokens}})
    }
}

/// Computes the usage the fake model reports for a request.
pub trait Billing: Send + Sync {
    fn usage(&self, call: &Billed<'_>) -> Usage;

    /// Why the provider would refuse the request (answered 400 with this
    /// message), when it would; a billing model that checks nothing
    /// refuses nothing.
    fn refusal(&self, call: &Billed<'_>) -> Option<String> {
        let _ = call;
        None
    }
}

/// Fixed counts: 7 output tokens; for OpenAI 120 prompt tokens of which 100
/// cached, for Anthropic 20 uncached input tokens, 100 read from the cache
/// and 5 written. Counting, OpenAI's prompt tokens are a quarter of the
/// request's bytes instead (as a real tokenizer would give, roughly).
#[derive(Debug, Clone, Copy, Default)]
pub struct Flat {
    pub counting: bool,
}

impl Billing for Flat {
    fn usage(&self, call: &Billed<'_>) -> Usage {
        match call.format {
            Format::OpenAi => Usage {
                prompt_tokens: if self.counting {
                    call.body.len() as u64 / 4
                } else {
                    120
                },
                cache_read_tokens: 100,
                cache_write_tokens: 0,
                cache_write_1h_tokens: 0,
                output_tokens: 7,
            },
            Format::Anthropic => Usage {
                prompt_tokens: 125,
                cache_read_tokens: 100,
                cache_write_tokens: 5,
                cache_write_1h_tokens: 0,
                output_tokens: 7,
            },
        }
    }
}
