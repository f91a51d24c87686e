//! What a tool call gives besides the JSON the model reads: files (an MCP
//! server's images). A [`ToolOutput`] is the result object and the files
//! returned beside it, in order; the agent loop takes the files into the
//! media pipeline (stored once by hash, scaled down like user attachments)
//! and the result's transcript entry refers to them, while the result text
//! holds a short note per file in their place.

use serde_json::Value;

/// A tool's result: the object the model reads, and its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// What the model reads (the loop adds `success`, and `files`, the
    /// note of each file, when there are files).
    pub value: Value,
    /// Files returned with it, in order; numbered from 1 in their notes.
    pub files: Vec<ToolFile>,
}

impl From<Value> for ToolOutput {
    fn from(value: Value) -> Self {
        Self {
            value,
            files: Vec::new(),
        }
    }
}

/// A file a tool returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFile {
    /// Its bytes (decoded: never base64).
    pub bytes: Vec<u8>,
    /// The media type the tool declared (the bytes decide what is kept).
    pub declared_type: String,
}
