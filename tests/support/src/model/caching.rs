//! A billing model that caches like the providers: [`Caching`] keeps what
//! each request wrote to the prompt cache and bills the next one by what of
//! its prefix is still there, on a clock the test moves
//! ([`Caching::advance`]).
//!
//! Anthropic (Messages): the prompt is the blocks in the provider's order,
//! tools → system → messages (`tool_choice` counts at the start of the
//! messages, so changing it keeps only the tools and system cached). An
//! entry is written at each `cache_control` breakpoint whose prefix holds at
//! least 1,024 tokens, living 5 minutes (or 1 hour with `"ttl": "1h"`) from
//! its last use; a breakpoint finds an earlier entry at its own block or up
//! to 19 blocks before it, and the longest found is read. What lies between
//! the read and the last breakpoint is written (at the price of the
//! breakpoint's TTL); the rest is plain input.
//!
//! OpenAI (Chat Completions): automatic prefix caching of the whole prompt
//! (tools, then the messages) per `prompt_cache_key`; a request reads its
//! longest common prefix with an entry of its key that is still alive,
//! counted from 1,024 tokens on in steps of 128, and leaves its own prompt
//! cached for 5 minutes from its last use. Nothing is billed as written.
//!
//! Tokens are a quarter of the bytes, as a tokenizer gives roughly. An
//! Anthropic request the API refuses (tool blocks without `tools`, more
//! than 4 breakpoints, a 1-hour breakpoint after a 5-minute one) is
//! refused here too ([`Billing::refusal`]).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::billing::{Billed, Billing, Format, Usage};

/// The fewest tokens a cached prefix holds.
const MIN_CACHED: u64 = 1024;
/// How far back from a breakpoint Anthropic looks for an earlier entry.
const LOOKBACK: usize = 20;
/// OpenAI counts cache hits in steps of this many tokens.
const OPENAI_STEP: u64 = 128;
const FIVE_MINUTES: Duration = Duration::from_secs(300);
const ONE_HOUR: Duration = Duration::from_secs(3600);

/// The caching billing model; clones share one cache and one ledger.
#[derive(Clone, Default)]
pub struct Caching {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    now: Duration,
    /// Moved on after each request.
    tick: Duration,
    /// Anthropic: the prefix hash at a breakpoint → (expiry, TTL).
    anthropic: HashMap<u64, (Duration, Duration)>,
    /// OpenAI: per `prompt_cache_key`, the prompts cached and their expiry.
    openai: HashMap<String, Vec<(String, Duration)>>,
    bills: Vec<Usage>,
    /// Every prompt so far, as the provider caches it, and per request the
    /// tokens it shares with an earlier one: what any cache could read.
    seen: Vec<String>,
    possible: Vec<u64>,
}

/// What a run of requests cost, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ledger {
    pub requests: usize,
    pub prompt_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Of the written tokens, those written for an hour.
    pub cache_write_1h_tokens: u64,
    /// What a cache could have read at most: every request's prefix
    /// shared with any earlier request (all but its new suffix).
    pub possible_read_tokens: u64,
}

impl Ledger {
    /// The share of input tokens read from the cache.
    pub fn read_share(&self) -> f64 {
        self.cache_read_tokens as f64 / self.prompt_tokens.max(1) as f64
    }

    /// The most of the input any cache could have read.
    pub fn possible_share(&self) -> f64 {
        self.possible_read_tokens as f64 / self.prompt_tokens.max(1) as f64
    }

    /// The input bill against the same tokens uncached: reads at 0.1×,
    /// 5-minute writes at 1.25×, 1-hour writes at 2×.
    pub fn cost_ratio(&self) -> f64 {
        let written_5m = self.cache_write_tokens - self.cache_write_1h_tokens;
        let plain = self.prompt_tokens - self.cache_read_tokens - self.cache_write_tokens;
        let bill = plain as f64
            + 0.1 * self.cache_read_tokens as f64
            + 1.25 * written_5m as f64
            + 2.0 * self.cache_write_1h_tokens as f64;
        bill / self.prompt_tokens.max(1) as f64
    }
}

impl Caching {
    /// A cache at time zero whose clock moves only when told.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock on by `step` after every request.
    #[must_use]
    pub fn tick(self, step: Duration) -> Self {
        self.lock().tick = step;
        self
    }

    /// Moves the clock on: entries not used within their TTL expire.
    pub fn advance(&self, by: Duration) {
        self.lock().now += by;
    }

    /// Each billed request's usage, in order.
    pub fn bills(&self) -> Vec<Usage> {
        self.lock().bills.clone()
    }

    /// The bills from the `from`-th on, summed.
    pub fn ledger_from(&self, from: usize) -> Ledger {
        let (bills, possible) = {
            let state = self.lock();
            (state.bills.clone(), state.possible.clone())
        };
        let mut ledger = Ledger {
            possible_read_tokens: possible.iter().skip(from).sum(),
            ..Ledger::default()
        };
        for bill in bills.iter().skip(from) {
            ledger.requests += 1;
            ledger.prompt_tokens += bill.prompt_tokens;
            ledger.cache_read_tokens += bill.cache_read_tokens;
            ledger.cache_write_tokens += bill.cache_write_tokens;
            ledger.cache_write_1h_tokens += bill.cache_write_1h_tokens;
        }
        ledger
    }

    /// Every bill, summed.
    pub fn ledger(&self) -> Ledger {
        self.ledger_from(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("lock")
    }
}

impl Billing for Caching {
    fn usage(&self, call: &Billed<'_>) -> Usage {
        let mut state = self.lock();
        let (mut usage, prompt) = match call.format {
            Format::Anthropic => state.anthropic_usage(call.request),
            Format::OpenAi => state.openai_usage(call.request),
        };
        let shared = state
            .seen
            .iter()
            .map(|earlier| common_prefix(earlier, &prompt))
            .max()
            .unwrap_or(0);
        // Counted in the bill's tokens too: a read is never more than
        // possible.
        let possible = (shared as u64 / 4).max(usage.cache_read_tokens);
        state.possible.push(possible.min(usage.prompt_tokens));
        state.seen.push(prompt);
        usage.output_tokens = 7;
        state.bills.push(usage);
        let tick = state.tick;
        state.now += tick;
        usage
    }

    fn refusal(&self, call: &Billed<'_>) -> Option<String> {
        Self::anthropic_refusal(call)
    }
}

impl Caching {
    /// Why Anthropic would refuse `call`, as [`Billing::refusal`] says.
    fn anthropic_refusal(call: &Billed<'_>) -> Option<String> {
        (call.format == Format::Anthropic)
            .then(|| anthropic_refusal(call.request))
            .flatten()
    }
}

/// One block of an Anthropic prompt: its running hash and token count
/// through it, and the TTL of its breakpoint, if it has one.
struct Block {
    hash: u64,
    tokens: u64,
    breakpoint: Option<Duration>,
}

impl State {
    /// The bill of an Anthropic request, and its prompt as cached.
    fn anthropic_usage(&mut self, request: &Value) -> (Usage, String) {
        let (blocks, prompt) = anthropic_blocks(request);
        let total = blocks.last().map_or(0, |block| block.tokens);
        let now = self.now;
        let mut hit: Option<usize> = None;
        for (index, block) in blocks.iter().enumerate() {
            if block.breakpoint.is_none() {
                continue;
            }
            let earliest = index.saturating_sub(LOOKBACK - 1);
            let found = (earliest..=index).rev().find(|&at| {
                self.anthropic
                    .get(&blocks[at].hash)
                    .is_some_and(|(expiry, _)| *expiry > now)
            });
            hit = hit.max(found);
        }
        if let Some(at) = hit
            && let Some((expiry, ttl)) = self.anthropic.get_mut(&blocks[at].hash)
        {
            *expiry = now + *ttl;
        }
        let read = hit.map_or(0, |at| blocks[at].tokens);
        let (mut written, mut written_1h, mut from) = (0, 0, read);
        for block in blocks.iter().skip(hit.map_or(0, |at| at + 1)) {
            let Some(ttl) = block.breakpoint else {
                continue;
            };
            if block.tokens < MIN_CACHED {
                continue;
            }
            let segment = block.tokens - from;
            written += segment;
            if ttl == ONE_HOUR {
                written_1h += segment;
            }
            from = block.tokens;
            let entry = self.anthropic.entry(block.hash).or_insert((now, ttl));
            *entry = (now + ttl, ttl);
        }
        let usage = Usage {
            prompt_tokens: total,
            cache_read_tokens: read,
            cache_write_tokens: written,
            cache_write_1h_tokens: written_1h,
            output_tokens: 0,
        };
        (usage, prompt)
    }

    /// The bill of an OpenAI request, and its prompt as cached.
    fn openai_usage(&mut self, request: &Value) -> (Usage, String) {
        let prompt = openai_prompt(request);
        let total = tokens(prompt.len());
        let key = request["prompt_cache_key"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let now = self.now;
        let entries = self.openai.entry(key).or_default();
        entries.retain(|(_, expiry)| *expiry > now);
        let mut best = 0;
        for (cached, expiry) in entries.iter_mut() {
            let common = common_prefix(cached, &prompt);
            if common > best {
                best = common;
            }
            if common >= MIN_CACHED as usize * 4 {
                *expiry = now + FIVE_MINUTES;
            }
        }
        let common = best as u64 / 4;
        let read = if total >= MIN_CACHED && common >= MIN_CACHED {
            MIN_CACHED + (common - MIN_CACHED) / OPENAI_STEP * OPENAI_STEP
        } else {
            0
        };
        entries.retain(|(cached, _)| !prompt.starts_with(cached.as_str()));
        entries.push((prompt.clone(), now + FIVE_MINUTES));
        let usage = Usage {
            prompt_tokens: total,
            cache_read_tokens: read,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
            output_tokens: 0,
        };
        (usage, prompt)
    }
}

/// The blocks of an Anthropic request in cache order, `cache_control` left
/// out of their bytes, and those bytes joined.
fn anthropic_blocks(request: &Value) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prompt = String::new();
    let mut hasher = DefaultHasher::new();
    let mut tokens_so_far = 0;
    let mut push = |bytes: String, breakpoint: Option<Duration>| {
        bytes.hash(&mut hasher);
        tokens_so_far += tokens(bytes.len());
        prompt.push_str(&bytes);
        blocks.push(Block {
            hash: hasher.finish(),
            tokens: tokens_so_far,
            breakpoint,
        });
    };
    for tool in request["tools"].as_array().into_iter().flatten() {
        let (bytes, breakpoint) = without_cache_control(tool);
        push(bytes, breakpoint);
    }
    match &request["system"] {
        Value::String(text) => push(text.clone(), None),
        Value::Array(system) => {
            for block in system {
                let (bytes, breakpoint) = without_cache_control(block);
                push(bytes, breakpoint);
            }
        }
        _ => {}
    }
    let choice = match &request["tool_choice"] {
        Value::Null => r#"{"type":"auto"}"#.to_owned(),
        other => other.to_string(),
    };
    let mut first = Some(choice);
    for message in request["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        let content = match &message["content"] {
            Value::String(text) => vec![serde_json::json!({"type": "text", "text": text})],
            Value::Array(content) => content.clone(),
            _ => Vec::new(),
        };
        for block in &content {
            let (bytes, breakpoint) = without_cache_control(block);
            let lead = first.take().unwrap_or_default();
            push(format!("{lead}{role}:{bytes}"), breakpoint);
        }
    }
    (blocks, prompt)
}

/// A block's bytes without its `cache_control`, and that breakpoint's TTL.
fn without_cache_control(block: &Value) -> (String, Option<Duration>) {
    let mut block = block.clone();
    let control = block
        .as_object_mut()
        .and_then(|object| object.remove("cache_control"));
    let ttl = control.map(|control| match control["ttl"].as_str() {
        Some("1h") => ONE_HOUR,
        _ => FIVE_MINUTES,
    });
    (block.to_string(), ttl)
}

/// An OpenAI request's prompt as the provider caches it: tools first, then
/// the messages.
fn openai_prompt(request: &Value) -> String {
    let mut prompt = request["tools"].to_string();
    for message in request["messages"].as_array().into_iter().flatten() {
        prompt.push('\n');
        prompt.push_str(&message.to_string());
    }
    prompt
}

fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// The bytes two strings share from their start.
fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Why Anthropic would refuse a request, when it would: message blocks of
/// tool use or results with no `tools` defined, more than 4 breakpoints, or
/// a 1-hour breakpoint after a 5-minute one.
fn anthropic_refusal(request: &Value) -> Option<String> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let uses_tools = messages.iter().any(|message| {
        message["content"].as_array().is_some_and(|blocks| {
            blocks
                .iter()
                .any(|block| matches!(block["type"].as_str(), Some("tool_use" | "tool_result")))
        })
    });
    let no_tools = request["tools"].as_array().is_none_or(Vec::is_empty);
    if uses_tools && no_tools {
        return Some(
            "Requests which include `tool_use` or `tool_result` blocks must define tools."
                .to_owned(),
        );
    }
    let mut ttls = Vec::new();
    let mut collect = |value: &Value| {
        if let Some(control) = value.get("cache_control") {
            ttls.push(control["ttl"].as_str() == Some("1h"));
        }
    };
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .for_each(&mut collect);
    request["system"]
        .as_array()
        .into_iter()
        .flatten()
        .for_each(&mut collect);
    for message in &messages {
        message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .for_each(&mut collect);
    }
    if ttls.len() > 4 {
        return Some(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {}.",
            ttls.len()
        ));
    }
    if ttls.windows(2).any(|pair| !pair[0] && pair[1]) {
        return Some(
            "a ttl='1h' cache_control block must not come after a ttl='5m' one".to_owned(),
        );
    }
    None
}
