//! Server-rendered SVG charts for the console: a bar chart with labelled
//! axes, read at a glance and needing no script. Each bar carries a
//! `<title>` (shown on hover) with its exact value.

use maud::{Markup, html};

/// One bar: its label on the x axis and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 180.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 24.0;
const TOP: f64 = 12.0;

/// A bar chart of `bars`, values shown with `format` (the axis maximum too).
/// `max` fixes the top of the axis (for shares: 1.0); otherwise it is the
/// largest value. At most about twelve x labels are written.
pub fn bar_chart(
    caption: &str,
    bars: &[Bar],
    max: Option<f64>,
    format: impl Fn(f64) -> String,
) -> Markup {
    let top = max
        .unwrap_or_else(|| bars.iter().map(|bar| bar.value).fold(0.0, f64::max))
        .max(f64::MIN_POSITIVE);
    let plot_width = WIDTH - LEFT - 8.0;
    let plot_height = HEIGHT - BOTTOM - TOP;
    let count = bars.len().max(1);
    // Bar counts are small: the casts are exact.
    let slot = plot_width / count as f64;
    let label_every = count.div_ceil(12);
    html! {
        figure.chart {
            figcaption { (caption) }
            @if bars.is_empty() {
                p.empty { "No data yet." }
            } @else {
                svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(caption)
                    xmlns="http://www.w3.org/2000/svg" {
                    line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(HEIGHT - BOTTOM) {}
                    line.axis x1=(LEFT) y1=(HEIGHT - BOTTOM) x2=(WIDTH - 8.0) y2=(HEIGHT - BOTTOM) {}
                    text.tick x=(LEFT - 6.0) y=(TOP + 4.0) text-anchor="end" { (format(top)) }
                    text.tick x=(LEFT - 6.0) y=(HEIGHT - BOTTOM) text-anchor="end" { (format(0.0)) }
                    @for (index, bar) in bars.iter().enumerate() {
                        @let height = (bar.value / top).clamp(0.0, 1.0) * plot_height;
                        @let x = LEFT + slot * index as f64 + slot * 0.15;
                        rect.bar x=(round(x)) y=(round(HEIGHT - BOTTOM - height))
                            width=(round(slot * 0.7)) height=(round(height)) {
                            title { (bar.label) ": " (format(bar.value)) }
                        }
                        @if index % label_every == 0 {
                            text.tick x=(round(x + slot * 0.35)) y=(HEIGHT - 8.0)
                                text-anchor="middle" { (bar.label) }
                        }
                    }
                }
            }
        }
    }
}

fn round(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_value_and_escape_labels() {
        let bars = [
            Bar {
                label: "<a>".to_owned(),
                value: 1.0,
            },
            Bar {
                label: "b".to_owned(),
                value: 2.0,
            },
        ];
        let svg = bar_chart("Turns", &bars, None, |v| format!("{v:.0}")).into_string();
        assert!(svg.contains("&lt;a&gt;: 1"), "{svg}");
        assert!(
            svg.contains(&format!("height=\"{}\"", HEIGHT - BOTTOM - TOP)),
            "{svg}"
        );
        assert!(svg.contains("height=\"72\""), "half the tallest: {svg}");
        let empty = bar_chart("Turns", &[], None, |v| v.to_string()).into_string();
        assert!(empty.contains("No data yet."));
    }
}
