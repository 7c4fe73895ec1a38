//! The scenario benchmark's two charts, drawn as SVG by plotters from the grant instants
//! the children report: `precision_1k.svg` (tokens granted over time at 1,000/s) and
//! `fairness.svg` (when the `take(10)` is served among the `take(1)` loops).
//!
//! plotters' SVG backend writes text as SVG `<text>` for the viewer to lay out, so no font
//! file is read here (plotters' `ttf` feature stays off); text widths are estimated.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One crate's grants, in microseconds from its limiter's creation, sorted.
pub struct Grants<'a> {
    pub label: String,
    pub color: RGBColor,
    pub instants_us: &'a [u64],
}

/// One crate's row in the fairness chart.
pub struct FairnessRow<'a> {
    pub label: &'a str,
    pub color: RGBColor,
    /// Instants of the `take(1)` grants, in microseconds.
    pub small_us: &'a [u64],
    /// Instant of the `take(10)` grant, if it was served within the window.
    pub big_us: Option<u64>,
    /// What to say of the `take(10)` at the row's end.
    pub note: String,
}

fn failed(error: impl std::fmt::Display) -> String {
    error.to_string()
}

fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

const FONT: &str = "sans-serif";

/// Tokens granted so far against time, one line per crate, and the ideal `rate × t` (the
/// limiters start empty, so none can be ahead of it).
pub fn precision(
    path: &Path,
    title: &str,
    rate: u64,
    ideal_label: &str,
    window_s: f64,
    lines: &[Grants],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let ideal = rate as f64 * window_s;
    let most = lines
        .iter()
        .map(|line| line.instants_us.len() as f64)
        .fold(ideal, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..window_s, 0f64..most * 1.05)
        .map_err(failed)?;
    chart
        .configure_mesh()
        .x_desc("time since the limiter was made (s)")
        .y_desc("tokens granted so far")
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 14))
        .y_label_formatter(&|tokens| format!("{tokens:.0}"))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(failed)?;
    for line in lines {
        let style = line.color.stroke_width(2);
        let cumulative = line
            .instants_us
            .iter()
            .enumerate()
            .map(|(i, &us)| (seconds(us), (i + 1) as f64))
            .filter(|&(t, _)| t <= window_s);
        chart
            .draw_series(LineSeries::new(
                std::iter::once((0.0, 0.0)).chain(cumulative),
                style,
            ))
            .map_err(failed)?
            .label(line.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
    }
    // Drawn last, dashed, so that a line on it still shows between the dashes.
    let ideal_style = BLACK.stroke_width(2);
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, 0.0), (window_s, ideal)],
            10,
            6,
            ideal_style,
        ))
        .map_err(failed)?
        .label(ideal_label)
        .legend(move |(x, y)| {
            PathElement::new(
                vec![(x, y), (x + 10, y), (x + 14, y), (x + 24, y)],
                ideal_style,
            )
        });
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(failed)
}

/// One row per crate over the window: a tick for each `take(1)` granted, an outline where
/// the `take(10)` was queued and a block where it was granted, a line of text saying when,
/// and a dashed line where first-in-first-out would serve it.
pub fn fairness(
    path: &Path,
    title: &str,
    window_s: f64,
    fifo_s: f64,
    rows: &[FairnessRow],
) -> Result<(), String> {
    let height = 250 + 80 * u32::try_from(rows.len()).unwrap_or(4);
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let count = rows.len();
    // Row i (from the top) sits at y = count - 1 - i, so the first row is drawn on top; a
    // row's height is 1, and a band of `HEADROOM` above the rows holds the legend.
    const HEADROOM: f64 = 1.0;
    let (bottom, top) = (-0.6, count as f64 - 0.4 + HEADROOM);
    let at = |i: usize| (count - 1 - i) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(190)
        .build_cartesian_2d(0f64..window_s, bottom..top)
        .map_err(failed)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        // The rows are named below, beside them, rather than by the axis's numbers.
        .y_labels(0)
        .x_desc("time since the limiter was made (s)")
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 14))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(failed)?;

    let fifo_style = BLACK.mix(0.55).stroke_width(2);
    chart
        .draw_series(DashedLineSeries::new(
            [(fifo_s, bottom), (fifo_s, top - HEADROOM)],
            6,
            5,
            fifo_style,
        ))
        .map_err(failed)?
        .label(format!(
            "first in, first out: take(10) served at {fifo_s} s"
        ))
        .legend(move |(x, y)| PathElement::new(vec![(x + 12, y - 7), (x + 12, y + 7)], fifo_style));

    let name_style = (FONT, 14)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for (i, row) in rows.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, at(i)));
        let name = Text::new(row.label, (x - 12, y), name_style.clone());
        root.draw(&name).map_err(failed)?;
    }

    let width = window_s / 150.0;
    let block = |t: f64, y: f64| [(t - width / 2.0, y - 0.3), (t + width / 2.0, y + 0.3)];
    for (i, row) in rows.iter().enumerate() {
        let y = at(i);
        let queued = Rectangle::new(block(width / 2.0, y), BLACK.stroke_width(1));
        let drawn = chart.draw_series([queued]).map_err(failed)?;
        if i == 0 {
            drawn.label("take(10) queued").legend(|(x, y)| {
                Rectangle::new([(x + 8, y - 7), (x + 16, y + 7)], BLACK.stroke_width(1))
            });
        }
        let tick = row.color.stroke_width(2);
        let ticks = row
            .small_us
            .iter()
            .map(|&us| seconds(us))
            .filter(|&t| t <= window_s)
            .map(move |t| PathElement::new(vec![(t, y - 0.22), (t, y + 0.22)], tick));
        let drawn = chart.draw_series(ticks).map_err(failed)?;
        if i == 0 {
            drawn
                .label("take(1) granted (one tick each)")
                .legend(|(x, y)| {
                    PathElement::new(
                        vec![(x + 12, y - 7), (x + 12, y + 7)],
                        BLACK.stroke_width(2),
                    )
                });
        }
        if let Some(us) = row.big_us {
            let granted = Rectangle::new(block(seconds(us), y), BLACK.filled());
            let drawn = chart.draw_series([granted]).map_err(failed)?;
            if i == 0 {
                drawn.label("take(10) granted").legend(|(x, y)| {
                    Rectangle::new([(x + 8, y - 7), (x + 16, y + 7)], BLACK.filled())
                });
            }
        }
        // Above the row's ticks, right of the dashed line (a text's position is its top
        // left corner).
        let note = Text::new(
            row.note.clone(),
            (fifo_s + width, y + 0.48),
            (FONT, 14).into_font().color(&BLACK),
        );
        chart.draw_series([note]).map_err(failed)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(failed)
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The legend, boxed, at `position` inside the plot.
fn legend<'b: 'a, 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .margin(10)
        .draw()
        .map_err(failed)
}
