//! `switchboard usage`: tokens and cost per principal, session and day, with the
//! provider-cache reads and writes that make prompt caching visible.

use crate::domain::{Usage, day_label};
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use crate::store::UsageRow;

/// Prices of one model, in US dollars per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Price {
    /// Input tokens not read from or written to the cache.
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    /// Tokens written to the cache for five minutes.
    pub cache_write: f64,
    /// Tokens written to the cache for an hour (Anthropic's `"ttl": "1h"`);
    /// twice `input` when not given, as Anthropic bills them.
    pub cache_write_1h: Option<f64>,
}

impl Price {
    /// The cost of some usage in dollars. `input_tokens` includes cached
    /// tokens; they are priced at the cache rates instead.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cache_read_tokens + usage.cache_write_tokens;
        let fresh = usage.input_tokens.saturating_sub(cached);
        // Token counts are far below 2^52: the casts are exact.
        let hour = usage.cache_write_1h_tokens.min(usage.cache_write_tokens);
        let hour_price = self.cache_write_1h.unwrap_or(2.0 * self.input);
        let dollars = fresh as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_read_tokens as f64 * self.cache_read
            + (usage.cache_write_tokens - hour) as f64 * self.cache_write
            + hour as f64 * hour_price;
        dollars / 1_000_000.0
    }

    /// The cost of some usage in billionths of a dollar, as stored.
    pub fn cost_nanousd(&self, usage: &Usage) -> i64 {
        // Rounded, and far below 2^63.
        let nanos = (self.cost(usage) * 1e9).round() as i64;
        nanos.max(0)
    }
}

/// The price of a call: the answering model's (providers may name a dated
/// version), else the requested model's.
pub fn price_for<'a>(
    prices: &'a BTreeMap<String, Price>,
    answered: &str,
    requested: &str,
) -> Option<&'a Price> {
    prices.get(answered).or_else(|| prices.get(requested))
}

/// The cost in dollars of `usage` by `model`, when the model has a price:
/// how the report (and the console) prices its rows.
pub fn cost_of(prices: &BTreeMap<String, Price>, model: &str, usage: &Usage) -> Option<f64> {
    prices.get(model).map(|price| price.cost(usage))
}

/// Renders the usage report as a text table.
pub fn render(rows: &[UsageRow], prices: &BTreeMap<String, Price>) -> String {
    let mut out = String::from(
        "day         principal session                               task   model                calls      input  cache-read cache-write     output      cost\n",
    );
    let mut total = 0.0;
    for row in rows {
        let usage = row.summary.usage;
        let cost = cost_of(prices, &row.model, &usage);
        total += cost.unwrap_or(0.0);
        let day = day_label(row.day);
        let _ = writeln!(
            out,
            "{day:<11} {:<9} {:<37} {:<6} {:<20} {:>5} {:>10} {:>11} {:>11} {:>10} {:>9}",
            row.principal_id
                .map_or_else(|| "-".to_owned(), |id| id.to_string()),
            row.session_id,
            row.task_id
                .map_or_else(|| "-".to_owned(), |id| id.to_string()),
            row.model,
            row.summary.calls,
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.output_tokens,
            cost.map_or_else(|| "-".to_owned(), |c| format!("${c:.4}")),
        );
    }
    let _ = write!(
        out,
        "total cost: ${total:.4} (models without a price count as 0)"
    );
    out
}

/// Renders the usage report as CSV (RFC 4180), one row per principal,
/// session, day, model and scheduled task (`task`, the last column, empty
/// for messages people sent), priced as [`render`] prices them; the cost is
/// empty for a model without a price.
pub fn render_csv(rows: &[UsageRow], prices: &BTreeMap<String, Price>) -> String {
    let mut out = String::from(
        "day,principal,session,model,calls,input_tokens,cache_read_tokens,cache_write_tokens,output_tokens,cost_usd,task\r\n",
    );
    for row in rows {
        let usage = row.summary.usage;
        let cost = cost_of(prices, &row.model, &usage);
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{}\r\n",
            day_label(row.day),
            row.principal_id
                .map(|id| id.to_string())
                .unwrap_or_default(),
            csv_field(row.session_id.as_str()),
            csv_field(&row.model),
            row.summary.calls,
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.output_tokens,
            cost.map(|c| format!("{c:.6}")).unwrap_or_default(),
            row.task_id.map(|id| id.to_string()).unwrap_or_default(),
        );
    }
    out
}

/// A CSV field, quoted when it holds a comma, a quote or a line break;
/// one starting like a spreadsheet formula is prefixed with `'`.
fn csv_field(value: &str) -> String {
    let value = if value.starts_with(['=', '+', '-', '@']) {
        format!("'{value}")
    } else {
        value.to_owned()
    };
    if value.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::UsageSummary;

    #[test]
    fn cached_tokens_are_priced_at_cache_rates() {
        let price = Price {
            input: 1.0,
            output: 2.0,
            cache_read: 0.1,
            cache_write: 1.25,
            cache_write_1h: None,
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            cache_read_tokens: 600_000,
            cache_write_tokens: 100_000,
            cache_write_1h_tokens: 0,
        };
        let cost = price.cost(&usage);
        assert!((cost - (0.3 + 1.0 + 0.06 + 0.125)).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn the_report_lists_rows_and_a_total() {
        let rows = [UsageRow {
            principal_id: Some(crate::domain::PrincipalId::new(7)),
            session_id: crate::domain::SessionId::parse("s1").expect("valid id"),
            day: 20_000,
            model: "m".to_owned(),
            task_id: Some(crate::domain::TaskId::new(3)),
            summary: UsageSummary {
                calls: 2,
                usage: Usage {
                    input_tokens: 100,
                    output_tokens: 10,
                    cache_read_tokens: 80,
                    cache_write_tokens: 0,
                    cache_write_1h_tokens: 0,
                },
            },
        }];
        let prices = BTreeMap::from([(
            "m".to_owned(),
            Price {
                input: 1.0,
                ..Price::default()
            },
        )]);
        let report = render(&rows, &prices);
        assert!(report.contains("2024-10-04"), "{report}");
        assert!(report.contains(" 7         s1 "), "{report}");
        assert!(report.contains(" 3      m "), "the task: {report}");
        assert!(report.contains("$0.0000"));
        assert!(report.ends_with("total cost: $0.0000 (models without a price count as 0)"));
        let csv = render_csv(&rows, &prices);
        assert_eq!(
            csv.lines().nth(1),
            Some("2024-10-04,7,s1,m,2,100,80,0,10,0.000020,3")
        );
    }

    #[test]
    fn csv_fields_are_quoted_and_formulas_defused() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=1+1"), "'=1+1");
        assert_eq!(csv_field("gpt-4o"), "gpt-4o");
    }
}
