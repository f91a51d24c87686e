//! Canonical JSON: object keys sorted, no insignificant whitespace.
//!
//! Tool-call arguments are re-serialised this way so that the same call always
//! has the same bytes in the prompt prefix, whatever key order or spacing the
//! model produced. The sort is explicit so it holds even if some dependency
//! turns on serde_json's `preserve_order` feature.

use serde_json::Value;

/// Serialises `value` with object keys sorted at every depth.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_value(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sorted_at_every_depth_and_spacing_removed() {
        let value: Value =
            serde_json::from_str(r#"{ "b": 1, "a": { "z": [ {"y":2, "x":1} ], "c": "s" } }"#)
                .expect("valid json");
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"c":"s","z":[{"x":1,"y":2}]},"b":1}"#
        );
    }

    #[test]
    fn strings_are_escaped() {
        let value = serde_json::json!({"q": "a\"b\n"});
        assert_eq!(canonical_json(&value), r#"{"q":"a\"b\n"}"#);
    }
}
