//! An MCP server's elicitation (a question it asks during a tool call) as
//! the person sees it, and their answer as the content the server asked
//! for. Only form elicitation is taken (a URL to open is declined), and a
//! form is read as what a chat can ask: one field (a choice of its `enum`,
//! yes or no for a boolean, or a value in the person's own words), none (a
//! confirmation), or several (answered as a JSON object).

use serde_json::{Map, Value, json};

use crate::tools::ask_user::MAX_CHOICES;

/// A form to put to the person.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    /// What the person is asked, naming the server.
    pub question: String,
    /// Offered as buttons; empty for an answer in their own words.
    pub choices: Vec<String>,
    fields: Fields,
}

#[derive(Debug, Clone, PartialEq)]
enum Fields {
    /// Nothing to fill in: yes goes on, no declines.
    Confirm,
    /// One field, of this JSON type (`string`, `number`, `integer`,
    /// `boolean`).
    One { name: String, kind: String },
    /// Several: the answer is a JSON object.
    Many,
}

const YES: &str = "Yes";
const NO: &str = "No";

impl Form {
    /// Reads `message` and the requested schema (as JSON) from `server`.
    #[must_use]
    pub fn read(server: &str, message: &str, schema: &Value) -> Self {
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let asks = format!("The tool server `{server}` asks: {message}");
        match properties.len() {
            0 => Self {
                question: asks,
                choices: vec![YES.to_owned(), NO.to_owned()],
                fields: Fields::Confirm,
            },
            1 => {
                let (name, property) = properties.into_iter().next().unwrap_or_default();
                let kind = property
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("string")
                    .to_owned();
                let options = options(&property);
                let choices = if kind == "boolean" {
                    vec![YES.to_owned(), NO.to_owned()]
                } else if (1..=MAX_CHOICES).contains(&options.len()) {
                    options.clone()
                } else {
                    Vec::new()
                };
                let question = if choices.is_empty() && !options.is_empty() {
                    format!("{asks}\n\nOne of: {}.", options.join(", "))
                } else {
                    asks
                };
                Self {
                    question,
                    choices,
                    fields: Fields::One { name, kind },
                }
            }
            _ => {
                let names: Vec<String> = properties
                    .iter()
                    .map(|(name, property)| {
                        let kind = property.get("type").and_then(Value::as_str);
                        format!("`{name}` ({})", kind.unwrap_or("string"))
                    })
                    .collect();
                Self {
                    question: format!(
                        "{asks}\n\nReply with a JSON object with {}.",
                        names.join(", ")
                    ),
                    choices: Vec::new(),
                    fields: Fields::Many,
                }
            }
        }
    }

    /// The content an answer gives the server: `Ok(Some(..))` to accept,
    /// `Ok(None)` when the answer declines (no to a confirmation), `Err`
    /// when it does not fit the form.
    ///
    /// # Errors
    /// The answer is not a value of the field's type (or not an object).
    pub fn content(&self, answer: &str) -> Result<Option<Value>, String> {
        let answer = answer.trim();
        match &self.fields {
            Fields::Confirm => Ok(yes_or_no(answer)?.then(|| json!({}))),
            Fields::One { name, kind } => {
                let value = match kind.as_str() {
                    "boolean" => Value::Bool(yes_or_no(answer)?),
                    "integer" => answer
                        .parse::<i64>()
                        .map(Value::from)
                        .map_err(|_| format!("`{answer}` is not a whole number"))?,
                    "number" => answer
                        .parse::<f64>()
                        .ok()
                        .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
                        .ok_or_else(|| format!("`{answer}` is not a number"))?,
                    _ => Value::String(answer.to_owned()),
                };
                let mut fields = Map::new();
                fields.insert(name.clone(), value);
                Ok(Some(Value::Object(fields)))
            }
            Fields::Many => match serde_json::from_str::<Value>(answer) {
                Ok(Value::Object(fields)) => Ok(Some(Value::Object(fields))),
                _ => Err("the answer is not a JSON object".to_owned()),
            },
        }
    }
}

/// A property's offered values: its `enum`, or its `oneOf` constants.
fn options(property: &Value) -> Vec<String> {
    if let Some(values) = property.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
    }
    property
        .get("oneOf")
        .and_then(Value::as_array)
        .map(|options| {
            options
                .iter()
                .filter_map(|o| o.get("const").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn yes_or_no(answer: &str) -> Result<bool, String> {
    match answer.to_ascii_lowercase().as_str() {
        "yes" | "y" | "true" | "ok" => Ok(true),
        "no" | "n" | "false" => Ok(false),
        _ => Err(format!("`{answer}` is neither yes nor no")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_field_with_an_enum_is_a_choice() {
        let schema = json!({"type": "object", "properties": {
            "size": {"type": "string", "enum": ["small", "large"]}}});
        let form = Form::read("shop", "Which size?", &schema);
        assert_eq!(form.choices, ["small", "large"]);
        assert!(form.question.contains("`shop` asks: Which size?"));
        assert_eq!(form.content("large"), Ok(Some(json!({"size": "large"}))));
    }

    #[test]
    fn answers_take_the_fields_type_or_are_refused() {
        let form = Form::read(
            "s",
            "Sure?",
            &json!({"properties": {"ok": {"type": "boolean"}}}),
        );
        assert_eq!(form.choices, [YES, NO]);
        assert_eq!(form.content("No"), Ok(Some(json!({"ok": false}))));
        let age = Form::read(
            "s",
            "Age?",
            &json!({"properties": {"age": {"type": "integer"}}}),
        );
        assert!(age.choices.is_empty());
        assert_eq!(age.content(" 41 "), Ok(Some(json!({"age": 41}))));
        assert!(age.content("forty").is_err());
        let confirm = Form::read("s", "Go on?", &json!({"properties": {}}));
        assert_eq!(confirm.content("no"), Ok(None));
        assert_eq!(confirm.content("yes"), Ok(Some(json!({}))));
        let many = Form::read(
            "s",
            "Who?",
            &json!({"properties": {"a": {"type": "string"}, "b": {"type": "number"}}}),
        );
        assert!(many.question.contains("`a` (string), `b` (number)"));
        assert_eq!(
            many.content(r#"{"a":"x","b":2}"#),
            Ok(Some(json!({"a":"x","b":2})))
        );
        assert!(many.content("x").is_err());
    }
}
