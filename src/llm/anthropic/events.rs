//! Decoding a streamed Messages response: the events `message_start`,
//! `content_block_start`/`_delta`/`_stop`, `message_delta`,
//! `message_stop`, `ping` and `error`. Text deltas are passed on as they
//! come, and the blocks become the same [`MessagesResponse`] an unstreamed
//! call parses, so the result is identical; `message_stop` completes it.
//! An `error` event is classified like the status it stands for
//! (`overloaded_error` like a 529, retried).

use serde::Deserialize;
use serde_json::Value;

use super::Anthropic;
use super::response::{MessagesResponse, ResponseBlock, WireUsage, response_of};
use crate::llm::sse::SseEvent;
use crate::llm::stream::{
    OnStream, StreamDecoder, StreamEvent, bad_event, cut_short, in_stream_error,
};
use crate::llm::wire::WireFormat;
use crate::llm::{LlmError, ModelResponse};

/// One event of a streamed Messages response, by its `type`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDeltaBody>,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Error {
        error: Value,
    },
    /// `ping`, `content_block_stop`, and whatever comes next.
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StartMessage {
    id: Option<String>,
    model: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    /// Signatures, citations, and whatever comes next.
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

/// A content block being assembled from its deltas.
enum PartialBlock {
    Text(String),
    Thinking(String),
    ToolUse {
        id: String,
        name: String,
        /// The `input` of `content_block_start`, used when no JSON follows.
        start: Value,
        json: String,
    },
    Other,
}

/// Assembles a streamed Messages response.
pub(crate) struct EventDecoder<'a> {
    key: &'a str,
    id: Option<String>,
    model: Option<String>,
    blocks: Vec<Option<PartialBlock>>,
    stop_reason: Option<String>,
    usage: WireUsage,
    started: bool,
    done: bool,
}

impl<'a> EventDecoder<'a> {
    pub(super) fn new(key: &'a str) -> Self {
        Self {
            key,
            id: None,
            model: None,
            blocks: Vec::new(),
            stop_reason: None,
            usage: WireUsage::default(),
            started: false,
            done: false,
        }
    }

    /// Later usage fields replace earlier ones (`message_delta` carries the
    /// final output count, and may repeat the input counts).
    fn merge_usage(&mut self, usage: WireUsage) {
        let WireUsage {
            input_tokens,
            output_tokens,
            cache_creation_input_tokens,
            cache_read_input_tokens,
            cache_creation,
        } = usage;
        let target = &mut self.usage;
        target.input_tokens = input_tokens.or(target.input_tokens);
        target.output_tokens = output_tokens.or(target.output_tokens);
        target.cache_creation_input_tokens =
            cache_creation_input_tokens.or(target.cache_creation_input_tokens);
        target.cache_read_input_tokens = cache_read_input_tokens.or(target.cache_read_input_tokens);
        target.cache_creation = cache_creation.or(target.cache_creation);
    }

    fn message_start(&mut self, message: StartMessage) {
        self.started = true;
        self.id = message.id;
        self.model = message.model;
        if let Some(usage) = message.usage {
            self.merge_usage(usage);
        }
    }

    /// A block begins; a text block's first text (usually none) is heard.
    fn block_start(&mut self, index: usize, content_block: StartBlock, on: OnStream<'_>) {
        let block = match content_block {
            StartBlock::Text { text } => {
                if !text.is_empty() {
                    on(StreamEvent::Text(&text));
                }
                PartialBlock::Text(text)
            }
            StartBlock::Thinking { thinking } => PartialBlock::Thinking(thinking),
            StartBlock::ToolUse { id, name, input } => PartialBlock::ToolUse {
                id,
                name,
                start: input,
                json: String::new(),
            },
            StartBlock::Other => PartialBlock::Other,
        };
        if self.blocks.len() <= index {
            self.blocks.resize_with(index + 1, || None);
        }
        self.blocks[index] = Some(block);
    }

    /// A block grows; text is heard at once.
    fn block_delta(
        &mut self,
        index: usize,
        delta: BlockDelta,
        on: OnStream<'_>,
    ) -> Result<(), LlmError> {
        let Some(Some(block)) = self.blocks.get_mut(index) else {
            return Err(LlmError::InvalidResponse(format!(
                "the response stream sent a delta for block {index}, which never started"
            )));
        };
        match (block, delta) {
            (PartialBlock::Text(text), BlockDelta::TextDelta { text: piece }) => {
                on(StreamEvent::Text(&piece));
                text.push_str(&piece);
            }
            (PartialBlock::Thinking(text), BlockDelta::ThinkingDelta { thinking }) => {
                text.push_str(&thinking);
            }
            (PartialBlock::ToolUse { json, .. }, BlockDelta::InputJsonDelta { partial_json }) => {
                json.push_str(&partial_json);
            }
            (_, BlockDelta::Other) | (PartialBlock::Other, _) => {}
            _ => {
                return Err(LlmError::InvalidResponse(format!(
                    "the response stream sent a delta that does not fit block {index}"
                )));
            }
        }
        Ok(())
    }

    fn message_delta(&mut self, delta: Option<MessageDeltaBody>, usage: Option<WireUsage>) {
        if let Some(reason) = delta.and_then(|delta| delta.stop_reason) {
            self.stop_reason = Some(reason);
        }
        if let Some(usage) = usage {
            self.merge_usage(usage);
        }
    }
}

impl StreamDecoder for EventDecoder<'_> {
    fn event(&mut self, event: &SseEvent, on: OnStream<'_>) -> Result<(), LlmError> {
        if event.data.trim().is_empty() {
            return Ok(());
        }
        let wire: WireEvent =
            serde_json::from_str(&event.data).map_err(|error| bad_event(&error))?;
        match wire {
            WireEvent::MessageStart { message } => self.message_start(message),
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => self.block_start(index, content_block, on),
            WireEvent::ContentBlockDelta { index, delta } => self.block_delta(index, delta, on)?,
            WireEvent::MessageDelta { delta, usage } => self.message_delta(delta, usage),
            WireEvent::MessageStop => self.done = true,
            WireEvent::Error { error } => {
                return Err(in_stream_error(&error, Anthropic::BUSY, self.key));
            }
            WireEvent::Other => {}
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(self) -> Result<ModelResponse, LlmError> {
        if !self.done {
            return Err(cut_short());
        }
        if !self.started {
            return Err(LlmError::InvalidResponse(
                "the response stream never started a message".to_owned(),
            ));
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for block in self.blocks.into_iter().flatten() {
            content.push(block.finish()?);
        }
        let response = MessagesResponse {
            id: self.id,
            model: self.model,
            content,
            stop_reason: self.stop_reason,
            usage: Some(self.usage),
        };
        Ok(response_of(response))
    }
}

impl PartialBlock {
    /// The whole block; a tool call's input is its streamed JSON, or the
    /// start's input when none followed.
    fn finish(self) -> Result<ResponseBlock, LlmError> {
        Ok(match self {
            Self::Text(text) => ResponseBlock::Text { text },
            Self::Thinking(thinking) => ResponseBlock::Thinking { thinking },
            Self::ToolUse {
                id,
                name,
                start,
                json,
            } => {
                let input = if json.trim().is_empty() {
                    start
                } else {
                    serde_json::from_str(&json).map_err(|error| {
                        LlmError::InvalidResponse(format!(
                            "the streamed input of tool call {id} is not JSON: {error}"
                        ))
                    })?
                };
                ResponseBlock::ToolUse { id, name, input }
            }
            Self::Other => ResponseBlock::Other,
        })
    }
}
