//! Bound values written into SQL text as literals, for PostgreSQL batches.
//!
//! A batch reaches PostgreSQL as one simple-protocol query string (see
//! `batch`), and the simple protocol takes no parameters. So the arguments
//! of each `EXECUTE` of a batched (prepared) statement are written here as
//! literals. Two properties make that safe and faithful:
//!
//! - **Nothing in a value can end the literal.** Text becomes an escape
//!   string `E'…'` in which every backslash and every single quote is
//!   doubled. In an escape string a doubled backslash is one backslash and a
//!   doubled quote is one quote whatever `standard_conforming_strings` says,
//!   so the value reads back byte for byte and no quote or backslash in it
//!   can close the literal early. The only byte PostgreSQL text cannot hold,
//!   NUL, is refused (the extended protocol would refuse it too).
//! - **Each literal has the type its parameter had.** The extended protocol
//!   binds an [`Arg::Int`] as `bigint` and an [`Arg::Text`] as `text`, NULLs
//!   included, so each literal is wrapped in `CAST(… AS BIGINT)` or
//!   `CAST(… AS TEXT)`: `$1 * 1000` must not become 32-bit arithmetic just
//!   because the value happens to fit in 32 bits. `CAST(…)` reads as one
//!   expression in an `EXECUTE`'s argument list, and takes `i64::MIN` (whose
//!   digits alone, without the sign, do not fit in a `bigint`).
//!
//! The values go into the `EXECUTE` only, never into a statement's SQL, so a
//! `$1` inside a value stays text.

use std::fmt::Write as _;

use super::batch::Arg;

/// Why a statement's arguments could not be written in as literals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LiteralError {
    #[error("a text argument holds a NUL byte, which PostgreSQL text cannot store")]
    NulInText,
    #[error("placeholder ${placeholder} has no argument ({arguments} given)")]
    MissingArgument {
        placeholder: usize,
        arguments: usize,
    },
    #[error("argument {argument} is not used by any placeholder")]
    UnusedArgument { argument: usize },
}

/// Appends `arg` to `out` as a typed SQL literal.
///
/// # Errors
/// Text holding a NUL byte.
pub(super) fn push_literal(out: &mut String, arg: &Arg) -> Result<(), LiteralError> {
    match arg {
        Arg::Int(Some(value)) => {
            // Writing to a String cannot fail.
            let _ = write!(out, "CAST({value} AS BIGINT)");
        }
        Arg::Int(None) => out.push_str("CAST(NULL AS BIGINT)"),
        Arg::Text(None) => out.push_str("CAST(NULL AS TEXT)"),
        Arg::Text(Some(text)) => {
            if text.contains('\0') {
                return Err(LiteralError::NulInText);
            }
            out.reserve(text.len() + 20);
            out.push_str("CAST(E'");
            for c in text.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\'' => out.push_str("''"),
                    c => out.push(c),
                }
            }
            out.push_str("' AS TEXT)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn literal(arg: Arg) -> Result<String, LiteralError> {
        let mut out = String::new();
        push_literal(&mut out, &arg).map(|()| out)
    }

    #[test]
    fn quotes_and_backslashes_are_doubled_inside_an_escape_string() {
        assert_eq!(
            literal(r"it's a \ and \' and E'x'".into()),
            Ok(r"CAST(E'it''s a \\ and \\'' and E''x''' AS TEXT)".to_owned())
        );
        assert_eq!(
            literal("$1 ü 🙂\n".into()),
            Ok("CAST(E'$1 ü 🙂\n' AS TEXT)".to_owned())
        );
    }

    #[test]
    fn integers_and_nulls_keep_their_parameter_types() {
        assert_eq!(
            literal(i64::MIN.into()),
            Ok("CAST(-9223372036854775808 AS BIGINT)".to_owned())
        );
        assert_eq!(
            literal(Arg::Int(None)),
            Ok("CAST(NULL AS BIGINT)".to_owned())
        );
        assert_eq!(
            literal(Arg::Text(None)),
            Ok("CAST(NULL AS TEXT)".to_owned())
        );
    }

    #[test]
    fn text_with_a_nul_byte_is_refused() {
        assert_eq!(literal("a\0b".into()), Err(LiteralError::NulInText));
    }
}
