//! The `calculator` tool: evaluates one arithmetic expression with `evalexpr`,
//! restricted to numbers, the usual operators, an allow-list of math
//! functions and the constants `pi` and `e`.
//!
//! Owns parsing and vetting of the expression tree (no variables, no
//! assignments, no string or bit functions), exact division (evalexpr would
//! truncate `7 / 2` to 3), evaluation against an immutable context, and
//! turning the value into `{"expression", "result"}`.
//!
//! Evaluation runs inline on the async task, not in `spawn_blocking`: the
//! expression is capped at [`MAX_EXPRESSION_CHARS`], evalexpr has no loops,
//! recursion or user functions, and every allowed function is O(1), so the
//! work is linear in the (small) tree and takes microseconds. A panic inside
//! the evaluator is caught and reported as a failure.

use std::panic::{AssertUnwindSafe, catch_unwind};

use async_trait::async_trait;
use evalexpr::{
    Context, DefaultNumericTypes, EvalexprError, EvalexprResult, Node, Operator, Value as ExprValue,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{CachePolicy, Tool, ToolContext, ToolError, arguments_schema};

/// How long a result is reused for the same expression ([`super::cache`]).
pub const CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Longest expression accepted, in characters.
pub const MAX_EXPRESSION_CHARS: usize = 1000;

/// Largest magnitude at which every integer is exactly representable in f64.
const MAX_EXACT_FLOAT_INT: f64 = 9_007_199_254_740_992.0; // 2^53

/// Functions the expression may call; all take and return numbers.
const ALLOWED_FUNCTIONS: &[&str] = &[
    "math::sqrt",
    "math::cbrt",
    "math::abs",
    "math::pow",
    "math::exp",
    "math::exp2",
    "math::ln",
    "math::log",
    "math::log2",
    "math::log10",
    "math::sin",
    "math::cos",
    "math::tan",
    "math::asin",
    "math::acos",
    "math::atan",
    "math::atan2",
    "math::sinh",
    "math::cosh",
    "math::tanh",
    "math::asinh",
    "math::acosh",
    "math::atanh",
    "math::hypot",
    "floor",
    "ceil",
    "round",
    "min",
    "max",
];

static PI: ExprValue = ExprValue::Float(std::f64::consts::PI);
static E: ExprValue = ExprValue::Float(std::f64::consts::E);

/// Evaluates arithmetic expressions; stateless.
#[derive(Debug, Clone, Copy, Default)]
pub struct Calculator;

const DESCRIPTION: &str = "Evaluate an arithmetic expression exactly instead of doing math in \
your head. Use it for any non-trivial calculation: sums, percentages, unit conversions, powers, \
roots, logarithms, trigonometry. Operators: + - * / % (remainder) ^ (power) and parentheses; \
division is exact (7 / 2 = 3.5). Constants: pi, e. Functions (call with parentheses, several \
arguments separated by commas): math::sqrt, math::cbrt, math::abs, math::pow(x, y), math::exp, \
math::exp2, math::ln, math::log(x, base), math::log2, math::log10, math::sin, math::cos, \
math::tan, math::asin, math::acos, math::atan, math::atan2(y, x), math::sinh, math::cosh, \
math::tanh, math::asinh, math::acosh, math::atanh, math::hypot(x, y), floor, ceil, round, \
min(a, b, ...), max(a, b, ...). Angles are in radians. No variables, assignments or text; at most \
1000 characters. Returns `expression` (as given) and `result` (a number; whole numbers are \
returned as integers). Division by zero, overflow and malformed expressions are errors.";

/// The arguments. Other fields are ignored, though the schema forbids them.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Args {
    /// The expression, e.g. "2 * (3 + 4) ^ 2" or "math::sqrt(2) * 10".
    #[schemars(length(max = MAX_EXPRESSION_CHARS))]
    expression: String,
}

#[async_trait]
impl Tool for Calculator {
    fn name(&self) -> &'static str {
        "calculator"
    }

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        arguments_schema::<Args>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    /// Arithmetic is the same for everyone and forever; a day bounds the
    /// cache's size.
    fn cache_policy(&self) -> Option<CachePolicy> {
        Some(CachePolicy {
            ttl: CACHE_TTL,
            per_user: false,
        })
    }

    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let Args { expression } = serde_json::from_value(args).map_err(|_| {
            ToolError::InvalidArguments(
                "`expression` is required and must be a string, e.g. \"2 * (3 + 4)\"".to_owned(),
            )
        })?;
        let result = evaluate(&expression)?;
        Ok(json!({ "expression": expression, "result": result }))
    }
}

/// Parses, vets and evaluates `expression`, returning a JSON number.
///
/// # Errors
/// `InvalidArguments` for anything wrong with the expression itself (empty,
/// too long, unparsable, unknown names, assignments, non-numeric result);
/// `Failed` for arithmetic failures (division by zero, overflow, a result
/// that is not a finite number).
pub fn evaluate(expression: &str) -> Result<Value, ToolError> {
    let chars = expression.chars().count();
    if chars > MAX_EXPRESSION_CHARS {
        return Err(ToolError::InvalidArguments(format!(
            "the expression is {chars} characters long; the limit is {MAX_EXPRESSION_CHARS}"
        )));
    }
    if expression.trim().is_empty() {
        return Err(ToolError::InvalidArguments(
            "the expression is empty".to_owned(),
        ));
    }

    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut tree =
            evalexpr::build_operator_tree::<DefaultNumericTypes>(expression).map_err(|e| {
                ToolError::InvalidArguments(format!("could not parse the expression: {e}"))
            })?;
        vet(&tree)?;
        rewrite_divisions(&mut tree)?;
        tree.eval_with_context(&CalcContext).map_err(eval_error)
    }));
    let value = match outcome {
        Ok(result) => result?,
        Err(_) => {
            return Err(ToolError::Failed(
                "the expression could not be evaluated".to_owned(),
            ));
        }
    };
    to_json(&value)
}

/// Rejects assignments, unknown variables and functions outside the allow-list.
fn vet(tree: &Node<DefaultNumericTypes>) -> Result<(), ToolError> {
    if let Some(name) = tree.iter_write_variable_identifiers().next() {
        return Err(ToolError::InvalidArguments(format!(
            "assignment to `{name}` is not supported: the calculator evaluates a single \
             expression and has no variables"
        )));
    }
    if let Some(name) = tree
        .iter_read_variable_identifiers()
        .find(|name| !matches!(*name, "pi" | "e"))
    {
        return Err(ToolError::InvalidArguments(format!(
            "unknown name `{name}`: variables are not supported; the only constants are pi and e"
        )));
    }
    if let Some(name) = tree
        .iter_function_identifiers()
        .find(|name| !ALLOWED_FUNCTIONS.contains(name))
    {
        return Err(ToolError::InvalidArguments(format!(
            "unknown or unsupported function `{name}`; available: {}",
            ALLOWED_FUNCTIONS.join(", ")
        )));
    }
    Ok(())
}

/// Name of the internal exact-division function `/` is rewritten to. Users
/// cannot call it directly: [`vet`] runs before the rewrite.
const EXACT_DIV: &str = "exact_div";

/// Makes `/` exact: evalexpr truncates integer division (7 / 2 = 3), so every
/// `a / b` node becomes `exact_div((a, b))`, evaluated by [`exact_div`].
fn rewrite_divisions(node: &mut Node<DefaultNumericTypes>) -> Result<(), ToolError> {
    for child in node.children_mut() {
        rewrite_divisions(child)?;
    }
    if matches!(node.operator(), Operator::Div) {
        let mut pair = tuple_node()?;
        *pair.children_mut() = std::mem::take(node.children_mut());
        *node.operator_mut() = Operator::FunctionIdentifier {
            identifier: EXACT_DIV.to_owned(),
        };
        *node.children_mut() = vec![pair];
    }
    Ok(())
}

/// A two-element tuple node (evalexpr offers no public node constructor).
fn tuple_node() -> Result<Node<DefaultNumericTypes>, ToolError> {
    let internal = || ToolError::Failed("the expression could not be evaluated".to_owned());
    let mut root =
        evalexpr::build_operator_tree::<DefaultNumericTypes>("0, 0").map_err(|_| internal())?;
    if matches!(root.operator(), Operator::Tuple) {
        return Ok(root);
    }
    match root.children_mut().pop() {
        Some(node) if matches!(node.operator(), Operator::Tuple) => Ok(node),
        _ => Err(internal()),
    }
}

/// `a / b`: an integer when both are integers and `b` divides `a`, otherwise
/// a float; dividing by zero is an error.
fn exact_div(argument: &ExprValue) -> EvalexprResult<ExprValue> {
    let operands = argument.as_fixed_len_tuple(2)?;
    let (dividend, divisor) = (&operands[0], &operands[1]);
    let error = || EvalexprError::DivisionError {
        dividend: dividend.clone(),
        divisor: divisor.clone(),
    };
    if let (ExprValue::Int(a), ExprValue::Int(b)) = (dividend, divisor) {
        if *b == 0 {
            return Err(error());
        }
        if a.checked_rem(*b) == Some(0) {
            return a.checked_div(*b).map(ExprValue::Int).ok_or_else(error);
        }
    }
    let (a, b) = (dividend.as_number()?, divisor.as_number()?);
    if b == 0.0 {
        return Err(error());
    }
    Ok(ExprValue::Float(a / b))
}

/// Immutable context: knows `pi` and `e`, provides [`EXACT_DIV`], allows only
/// [`ALLOWED_FUNCTIONS`] (which fall through to evalexpr's builtins) and
/// cannot be assigned to.
struct CalcContext;

impl Context for CalcContext {
    type NumericTypes = DefaultNumericTypes;

    fn get_value(&self, identifier: &str) -> Option<&ExprValue> {
        match identifier {
            "pi" => Some(&PI),
            "e" => Some(&E),
            _ => None,
        }
    }

    fn call_function(&self, identifier: &str, argument: &ExprValue) -> EvalexprResult<ExprValue> {
        if identifier == EXACT_DIV {
            exact_div(argument)
        } else if ALLOWED_FUNCTIONS.contains(&identifier) {
            // Not found here, so evalexpr uses its builtin of that name.
            Err(EvalexprError::FunctionIdentifierNotFound(
                identifier.to_owned(),
            ))
        } else {
            Err(EvalexprError::CustomMessage(format!(
                "function `{identifier}` is not available"
            )))
        }
    }

    fn are_builtin_functions_disabled(&self) -> bool {
        false
    }

    fn set_builtin_functions_disabled(&mut self, disabled: bool) -> EvalexprResult<()> {
        if disabled {
            Err(EvalexprError::BuiltinFunctionsCannotBeDisabled)
        } else {
            Ok(())
        }
    }
}

fn is_zero(value: &ExprValue) -> bool {
    match value {
        ExprValue::Int(n) => *n == 0,
        ExprValue::Float(f) => *f == 0.0,
        _ => false,
    }
}

fn eval_error(error: EvalexprError) -> ToolError {
    match error {
        EvalexprError::DivisionError { divisor, .. }
        | EvalexprError::ModulationError { divisor, .. }
            if is_zero(&divisor) =>
        {
            ToolError::Failed("division by zero".to_owned())
        }
        EvalexprError::AdditionError { .. }
        | EvalexprError::SubtractionError { .. }
        | EvalexprError::NegationError { .. }
        | EvalexprError::MultiplicationError { .. }
        | EvalexprError::DivisionError { .. }
        | EvalexprError::ModulationError { .. } => ToolError::Failed(
            "integer overflow: the result does not fit in a 64-bit integer; write a number \
             with a decimal point (e.g. 2.0) to calculate in floating point"
                .to_owned(),
        ),
        EvalexprError::ContextNotMutable => ToolError::InvalidArguments(
            "assignments are not supported: the calculator has no variables".to_owned(),
        ),
        other => ToolError::InvalidArguments(format!("could not evaluate the expression: {other}")),
    }
}

fn to_json(value: &ExprValue) -> Result<Value, ToolError> {
    match value {
        ExprValue::Int(n) => Ok(json!(n)),
        ExprValue::Float(f) if !f.is_finite() => Err(ToolError::Failed(
            "the result is not a finite number (division by zero, overflow, or a value outside \
             the function's domain such as math::sqrt(-1))"
                .to_owned(),
        )),
        ExprValue::Float(f) if f.fract() == 0.0 && f.abs() <= MAX_EXACT_FLOAT_INT => {
            // Exact: |f| <= 2^53 and f is whole.
            Ok(json!(*f as i64))
        }
        ExprValue::Float(f) => Ok(json!(f)),
        other => {
            let kind = match other {
                ExprValue::Boolean(_) => "a boolean",
                ExprValue::String(_) => "text",
                ExprValue::Tuple(_) => "a list of values",
                _ => "nothing",
            };
            Err(ToolError::InvalidArguments(format!(
                "the expression evaluates to {kind}, not a number; give one arithmetic expression"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema is in every cached prompt: its bytes must not drift.
    #[test]
    fn the_argument_schema_keeps_its_bytes() {
        let schema = serde_json::to_string(&Calculator.parameters()).unwrap();
        assert_eq!(
            schema,
            r#"{"additionalProperties":false,"properties":{"expression":{"description":"The expression, e.g. \"2 * (3 + 4) ^ 2\" or \"math::sqrt(2) * 10\".","maxLength":1000,"type":"string"}},"required":["expression"],"type":"object"}"#
        );
    }

    fn ctx() -> ToolContext {
        ToolContext {
            request_id: "r".to_owned(),
            session_id: crate::domain::SessionId::parse("s").expect("valid id"),
            inbound_id: crate::domain::InboundId::new(1),
            principal: None,
            subagents: None,
            person: None,
        }
    }

    fn eval(expr: &str) -> Value {
        evaluate(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    fn invalid(expr: &str) -> String {
        match evaluate(expr) {
            Err(ToolError::InvalidArguments(msg)) => msg,
            other => panic!("{expr}: expected InvalidArguments, got {other:?}"),
        }
    }

    fn failed(expr: &str) -> String {
        match evaluate(expr) {
            Err(ToolError::Failed(msg)) => msg,
            other => panic!("{expr}: expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn arithmetic_and_precedence() {
        assert_eq!(eval("1 + 2"), json!(3));
        assert_eq!(eval("2 + 3 * 4"), json!(14));
        assert_eq!(eval("(2 + 3) * 4"), json!(20));
        assert_eq!(eval("10 - 4 - 3"), json!(3));
        assert_eq!(eval("-5 + 2"), json!(-3));
        assert_eq!(eval("17 % 5"), json!(2));
        assert_eq!(eval("0.1 + 0.2"), json!(0.1 + 0.2));
        assert_eq!(eval("1.5 * 2"), json!(3));
        assert!(eval("1.5 * 2").is_i64());
        // Large integers stay exact.
        assert_eq!(
            eval("9007199254740993 + 1"),
            json!(9_007_199_254_740_994_i64)
        );
        assert_eq!(
            eval("9007199254740994 / 2"),
            json!(4_503_599_627_370_497_i64)
        );
    }

    #[test]
    fn division_is_exact() {
        assert_eq!(eval("7 / 2"), json!(3.5));
        assert_eq!(eval("6 / 3"), json!(2));
        assert!(eval("6 / 3").is_i64());
        assert_eq!(eval("1 / 4 + 1"), json!(1.25));
        assert_eq!(eval("(10 + 5) / 4"), json!(3.75));
        assert_eq!(eval("1 / (1 / 2)"), json!(2));
        assert_eq!(eval("7.5 / 2.5"), json!(3));
        assert_eq!(eval("-9 / 3"), json!(-3));
        assert_eq!(eval("100 / 8 / 5"), json!(2.5));
    }

    #[test]
    fn powers() {
        assert_eq!(eval("2 * (3 + 4) ^ 2"), json!(98));
        assert_eq!(eval("2 ^ 10"), json!(1024));
        assert_eq!(eval("2 ^ 0.5"), json!(2f64.sqrt()));
        assert_eq!(eval("2 ^ -1"), json!(0.5));
        assert_eq!(eval("math::pow(3, 3)"), json!(27));
        // Beyond 2^53 a whole float stays a float.
        assert_eq!(eval("2 ^ 60"), json!(2f64.powi(60)));
        assert!(eval("2 ^ 60").is_f64());
    }

    #[test]
    fn functions_and_constants() {
        assert_eq!(eval("math::sqrt(16)"), json!(4));
        assert_eq!(eval("math::sqrt(2)"), json!(2f64.sqrt()));
        assert_eq!(eval("math::abs(-7)"), json!(7));
        assert_eq!(eval("max(3, 9, 4)"), json!(9));
        assert_eq!(eval("min(3, 9, 4)"), json!(3));
        assert_eq!(eval("floor(2.7) + ceil(2.1) + round(2.5)"), json!(8));
        assert_eq!(eval("math::log(8, 2)"), json!(3));
        assert_eq!(eval("math::log10(1000)"), json!(3));
        assert_eq!(eval("pi"), json!(std::f64::consts::PI));
        assert_eq!(eval("math::ln(e)"), json!(1));
        assert_eq!(eval("math::sin(0)"), json!(0));
        assert_eq!(eval("math::hypot(3, 4)"), json!(5));
    }

    #[test]
    fn arithmetic_errors() {
        assert_eq!(failed("1 / 0"), "division by zero");
        assert_eq!(failed("1.0 / 0"), "division by zero");
        assert_eq!(failed("1 / (2 - 2.0)"), "division by zero");
        assert_eq!(failed("5 % 0"), "division by zero");
        assert!(failed("9223372036854775807 + 1").contains("overflow"));
        assert!(failed("9223372036854775807 * 2").contains("overflow"));
        assert!(failed("math::sqrt(-1)").contains("finite"));
        assert!(failed("10 ^ 400").contains("finite"));
    }

    #[test]
    fn malformed_and_non_numeric() {
        assert!(invalid("").contains("empty"));
        assert!(invalid("2 +").contains("parse") || invalid("2 +").contains("evaluate"));
        assert!(invalid("(1 + 2").contains("parse"));
        assert!(invalid("1 + 2)").contains("parse"));
        assert!(invalid("1 < 2").contains("boolean"));
        assert!(invalid("\"abc\"").contains("text"));
        assert!(invalid("1, 2").contains("list"));
        assert!(invalid("1 + true").contains("evaluate"));
        let long = format!("1{}", "+1".repeat(600));
        assert!(invalid(&long).contains("limit is 1000"));
    }

    #[test]
    fn names_are_restricted() {
        assert!(invalid("a = 3").contains("assignment"));
        assert!(invalid("a = 3; a * 2").contains("assignment"));
        assert!(invalid("pi = 3").contains("assignment"));
        assert!(invalid("x += 1").contains("assignment"));
        assert!(invalid("x + 1").contains("unknown name `x`"));
        assert!(invalid("str::from(1)").contains("unsupported function"));
        assert!(invalid("shl(1, 100)").contains("unsupported function"));
        assert!(invalid("len(\"abc\")").contains("unsupported function"));
        assert!(invalid("system(\"ls\")").contains("unsupported function"));
    }

    #[test]
    fn context_rejects_direct_calls() {
        // Defence in depth, should vetting ever be bypassed.
        let tree = evalexpr::build_operator_tree::<DefaultNumericTypes>("typeof(1)").unwrap();
        assert!(tree.eval_with_context(&CalcContext).is_err());
        let tree = evalexpr::build_operator_tree::<DefaultNumericTypes>("a = 1").unwrap();
        assert_eq!(
            tree.eval_with_context(&CalcContext),
            Err(EvalexprError::ContextNotMutable)
        );
    }

    #[test]
    fn deep_nesting_within_limit() {
        let nested = format!("{}1{}", "(".repeat(490), ")".repeat(490));
        assert_eq!(eval(&nested), json!(1));
        let negations = format!("{}1", "-".repeat(998));
        assert_eq!(eval(&negations), json!(1));
    }

    #[tokio::test]
    async fn call_returns_expression_and_result() {
        let v = Calculator
            .call(&ctx(), json!({"expression": "2 * (3 + 4) ^ 2"}))
            .await
            .unwrap();
        assert_eq!(v, json!({"expression": "2 * (3 + 4) ^ 2", "result": 98}));
        let err = Calculator.call(&ctx(), json!({})).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)));
        let err = Calculator
            .call(&ctx(), json!({"expression": 42}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)));
        assert_eq!(Calculator.name(), "calculator");
        assert!(Calculator.idempotent());
    }
}
