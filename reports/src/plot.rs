//! Drawing the plot models as SVG with `plotters`' SVG backend: text stays
//! SVG `<text>` (no font files, fontconfig or freetype), so every plot is a
//! string that the HTML report embeds inline.
//!
//! Categorical axes (problems, heatmap values, peer tests) are drawn on
//! numeric coordinates with their labels placed at the category centres via
//! `backend_coord`, so every category is labelled whatever the count.

use crate::error::{ReportError, Result};
use crate::labels::{self, Rect};
use crate::model::{Heatmap, PeerChart, PmuTable, Roofline, SpeedupRow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use tiletune_bench::roofline::Arithmetic;

const FONT: &str = "sans-serif";
const WIDTH: u32 = 960;

/// Tableau 10: distinguishable, also in grey-scale print.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn plot_err(plot: &str) -> impl Fn(DrawingAreaErrorKind<std::io::Error>) -> ReportError + use<'_> {
    move |e| ReportError::Plot {
        plot: plot.to_string(),
        detail: e.to_string(),
    }
}

/// Three significant digits, no exponent for the ranges a report shows.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "—".to_string()
    } else if a >= 1e5 || (a > 0.0 && a < 1e-3) {
        format!("{v:.2e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// [`fmt_num`] without trailing zeros, for axis ticks: `1`, `0.2`, `12.5`.
pub fn fmt_axis(v: f64) -> String {
    let s = fmt_num(v);
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn text_style(size: u32, pos: Pos) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(pos)
}

/// Runs `draw` on a white SVG canvas and returns the SVG text.
fn svg(
    plot: &str,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<()>,
) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err(plot))?;
        draw(&root)?;
        root.present().map_err(plot_err(plot))?;
    }
    Ok(out)
}

/// Text is about 0.6 em wide per character in a sans-serif face.
fn text_width(s: &str, size: u32) -> u32 {
    (s.chars().count() as f64 * size as f64 * 0.6).ceil() as u32
}

/// A text's box for placement: [`text_width`] by the line height (1.25 em,
/// ascender to descender).
fn label_size(s: &str, size: u32) -> (i32, i32) {
    (
        text_width(s, size) as i32,
        (size as f64 * 1.25).ceil() as i32,
    )
}

// ---- roofline ----------------------------------------------------------------

/// Log-log roofline: bandwidth roofs (GB/s × FLOP/byte), flat compute roofs
/// (f32 FMA solid, int8 dashed), and each problem's default (hollow) and
/// tuned (filled; a triangle for int8 work) point, numbered as in the table
/// beside it, the numbers placed by [`labels::place`] so none overlap.
pub fn roofline(r: &Roofline) -> Result<String> {
    let ((x0, x1), (y0, y1)) = r.bounds();
    svg("roofline", (WIDTH, 600), |root| {
        let e = plot_err("roofline");
        let mut chart = ChartBuilder::on(root)
            .margin(16)
            .x_label_area_size(56)
            .y_label_area_size(80)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(&e)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity (FLOP/byte; int8: op/byte, log scale)")
            .y_desc("performance (GFLOP/s; int8: GOP/s, log scale)")
            .axis_desc_style((FONT, 16))
            .label_style((FONT, 13))
            .x_label_formatter(&|v| fmt_axis(*v))
            .y_label_formatter(&|v| fmt_axis(*v))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(&e)?;
        let top_peak = r.peaks.first().map(|p| p.value);
        let mut series = 0;
        for roof in &r.bandwidth {
            let c = color(series);
            series += 1;
            // y = bw·x from the bottom edge (or left edge) to the top roof.
            let start = x0.max(y0 / roof.value);
            let end = x1.min(top_peak.unwrap_or(y1).min(y1) / roof.value);
            if end <= start {
                continue;
            }
            let pts = [(start, roof.value * start), (end, roof.value * end)];
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(&e)?
                .label(format!(
                    "{}: {} GB/s ({}t)",
                    roof.label,
                    fmt_num(roof.value),
                    roof.threads
                ))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
        }
        let best_bw = r.bandwidth.first().map(|b| b.value);
        // f32 FMA roofs solid, int8 roofs dashed.
        let flat = r
            .peaks
            .iter()
            .map(|roof| (roof, "GFLOP/s", false))
            .chain(r.int8_peaks.iter().map(|roof| (roof, "GOP/s", true)));
        for (roof, unit, dashed) in flat {
            let c = color(series);
            series += 1;
            let start = best_bw.map_or(x0, |bw| (roof.value / bw).max(x0));
            if start >= x1 {
                continue;
            }
            let line = [(start, roof.value), (x1, roof.value)];
            let style = c.stroke_width(2);
            let drawn = if dashed {
                chart.draw_series(DashedLineSeries::new(line, 8, 5, style))
            } else {
                chart.draw_series(LineSeries::new(line, style))
            };
            drawn
                .map_err(&e)?
                .label(format!(
                    "{}: {} {unit} ({}t)",
                    roof.label,
                    fmt_num(roof.value),
                    roof.threads
                ))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        }
        let tuned = RGBColor(20, 60, 160);
        let default = RGBColor(220, 90, 20);
        for p in &r.points {
            if let Some(d) = p.default_gflops {
                chart
                    .draw_series(LineSeries::new(
                        [(p.intensity, d), (p.intensity, p.tuned_gflops)],
                        RGBColor(150, 150, 150).stroke_width(1),
                    ))
                    .map_err(&e)?;
            }
        }
        chart
            .draw_series(r.points.iter().filter_map(|p| {
                p.default_gflops
                    .map(|d| Circle::new((p.intensity, d), 6, default.stroke_width(2)))
            }))
            .map_err(&e)?
            .label("analytic default")
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, default.stroke_width(2)));
        let is_int8 = |p: &&crate::model::RoofPoint| p.arith == Arithmetic::Int8;
        chart
            .draw_series(
                r.points
                    .iter()
                    .filter(|p| !is_int8(p))
                    .map(|p| Circle::new((p.intensity, p.tuned_gflops), 5, tuned.filled())),
            )
            .map_err(&e)?
            .label("tuned winner, f32 work")
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, tuned.filled()));
        if r.points.iter().any(|p| is_int8(&p)) {
            chart
                .draw_series(
                    r.points.iter().filter(is_int8).map(|p| {
                        TriangleMarker::new((p.intensity, p.tuned_gflops), 7, tuned.filled())
                    }),
                )
                .map_err(&e)?
                .label("tuned winner, int8 work (under its int8 peak)")
                .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, tuned.filled()));
        }
        // Point numbers, placed in pixels clear of each other and the legend.
        let (px0, py0) = chart.backend_coord(&(x0, y1));
        let (px1, py1) = chart.backend_coord(&(x1, y0));
        let bounds = Rect::new(px0, py0, px1 - px0, py1 - py0);
        let legend_lines = r.bandwidth.len() + r.peaks.len() + r.int8_peaks.len() + 3;
        let legend_w = r
            .bandwidth
            .iter()
            .chain(&r.peaks)
            .chain(&r.int8_peaks)
            .map(|roof| text_width(&roof.label, 13) + 170)
            .max()
            .unwrap_or(0)
            .max(text_width("tuned winner, int8 work (under its int8 peak)", 13) + 40);
        // plotters' legend: 5 px from the corner, about 20 px per entry.
        let legend = Rect::new(
            px0,
            py0,
            legend_w as i32 + 10,
            20 * legend_lines as i32 + 12,
        );
        let texts: Vec<String> = (1..=r.points.len()).map(|i| i.to_string()).collect();
        let anchors: Vec<(i32, i32)> = r
            .points
            .iter()
            .map(|p| chart.backend_coord(&(p.intensity, p.tuned_gflops)))
            .collect();
        let sizes: Vec<(i32, i32)> = texts.iter().map(|t| label_size(t, 13)).collect();
        let placed = labels::place(&anchors, &sizes, &[legend], bounds);
        for ((text, at), spot) in texts.iter().zip(&anchors).zip(&placed) {
            let rc = spot.rect;
            if spot.displaced {
                let to = (
                    if rc.x > at.0 { rc.x } else { rc.x + rc.w },
                    rc.y + rc.h / 2,
                );
                root.draw(&PathElement::new(
                    [*at, to],
                    RGBColor(120, 120, 120).stroke_width(1),
                ))
                .map_err(&e)?;
            }
            root.draw(&Text::new(
                text.clone(),
                (rc.x, rc.y + rc.h / 2),
                text_style(13, Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(&e)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(&e)?;
        Ok(())
    })
}

// ---- tuned vs default ------------------------------------------------------------

/// Half-width of the speedup axis in ln(×): the largest speedup or
/// slowdown plus room for its value label, at least ln 1.1 so that 1.02×
/// is a fifth of a half-axis long, never a sliver next to 0×.
fn speedup_span(speedups: impl Iterator<Item = f64>) -> f64 {
    let widest = speedups
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| s.ln().abs())
        .fold(0.0, f64::max);
    (widest * 1.25).max(1.1f64.ln())
}

/// Horizontal bars of default ÷ tuned per problem on a log axis centred on
/// 1× (the analytic default): a bar grows right from 1× when the tuned
/// choice is faster and left when it is slower, so 1.02× and 1.00× differ
/// visibly and 2× and 0.5× are equally long.
pub fn speedups(rows: &[SpeedupRow]) -> Result<String> {
    let rows: Vec<(&str, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.label.as_str(), r.speedup?)))
        .filter(|r| r.1.is_finite() && r.1 > 0.0)
        .collect();
    let n = rows.len().max(1);
    let span = speedup_span(rows.iter().map(|r| r.1));
    let label_w = rows
        .iter()
        .map(|r| text_width(r.0, 13))
        .max()
        .unwrap_or(60)
        .clamp(60, 420)
        + 16;
    let height = 130 + 34 * n as u32;
    // Headroom above the first bar for the 1× label.
    let top = n as f64 + 0.7;
    svg("speedup", (WIDTH, height), |root| {
        let e = plot_err("speedup");
        // x is ln(speedup): a linear axis in log space, ticks shown as ×.
        let mut chart = ChartBuilder::on(root)
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(label_w)
            .build_cartesian_2d(-span..span, 0f64..top)
            .map_err(&e)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .set_tick_mark_size(LabelAreaPosition::Left, 0)
            .x_desc("speedup over the analytic default (default time ÷ tuned time, ×, log scale)")
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .x_label_formatter(&|v| format!("{}×", fmt_axis(v.exp())))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(&e)?;
        let faster = RGBColor(44, 160, 44);
        let slower = RGBColor(214, 39, 40);
        let same = RGBColor(127, 127, 127);
        for (i, (label, s)) in rows.iter().enumerate() {
            // First row at the top.
            let y = (n - 1 - i) as f64;
            let x = s.ln();
            let c = if *s > 1.0 {
                faster
            } else if *s < 1.0 {
                slower
            } else {
                same
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.18), (x, y + 0.82)],
                    c.filled(),
                )))
                .map_err(&e)?;
            let (text, pos) = if *s >= 1.0 {
                (format!(" {}×", fmt_num(*s)), HPos::Left)
            } else {
                (format!("{}× ", fmt_num(*s)), HPos::Right)
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (x, y + 0.5),
                    text_style(13, Pos::new(pos, VPos::Center)),
                )))
                .map_err(&e)?;
            let (px, py) = chart.backend_coord(&(-span, y + 0.5));
            root.draw(&Text::new(
                label.to_string(),
                (px - 8, py),
                text_style(13, Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(&e)?;
        }
        chart
            .draw_series(LineSeries::new(
                [(0.0, 0.0), (0.0, n as f64 + 0.1)],
                BLACK.stroke_width(1),
            ))
            .map_err(&e)?;
        chart
            .draw_series(std::iter::once(Text::new(
                "1× = analytic default; green: tuned faster, red: slower".to_string(),
                (0.0, n as f64 + 0.15),
                text_style(13, Pos::new(HPos::Left, VPos::Bottom)),
            )))
            .map_err(&e)?;
        Ok(())
    })
}

// ---- heatmaps --------------------------------------------------------------------

/// Viridis, sampled at five stops and interpolated linearly.
pub fn viridis(t: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let f = t * (STOPS.len() - 1) as f64;
    let i = (f.floor() as usize).min(STOPS.len() - 2);
    let u = f - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |p: f64, q: f64| (p + (q - p) * u).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Where a value falls on the colour scale: 1 is the best end (yellow).
fn scale(h: &Heatmap, v: f64) -> f64 {
    let Some((lo, hi)) = h.range() else {
        return 0.0;
    };
    let t = if hi > lo { (v - lo) / (hi - lo) } else { 1.0 };
    if h.metric.higher_is_better() {
        t
    } else {
        1.0 - t
    }
}

/// The longest axis value shown in full; longer ones end in `…`.
const MAX_TICK_CHARS: usize = 28;

fn tick_text(v: &str) -> String {
    if v.chars().count() > MAX_TICK_CHARS {
        let mut t: String = v.chars().take(MAX_TICK_CHARS - 1).collect();
        t.push('…');
        t
    } else {
        v.to_string()
    }
}

/// How the x values of a heatmap are written under the cells: level when
/// the widest fits its cell, else turned 90° (one line height per cell),
/// and only every `step`-th one when even that does not fit, so no two
/// labels overlap.
#[derive(Clone, Copy, Debug, PartialEq)]
struct XTicks {
    rotate: bool,
    step: usize,
    /// Pixels below the grid for the labels and the axis name.
    area: u32,
}

fn x_ticks(values: &[String], cell_w: f64) -> XTicks {
    let widest = values
        .iter()
        .map(|v| text_width(&tick_text(v), 12))
        .max()
        .unwrap_or(0);
    if f64::from(widest) + 6.0 <= cell_w {
        return XTicks {
            rotate: false,
            step: 1,
            area: 56,
        };
    }
    let line = f64::from(label_size("0", 12).1) + 2.0;
    XTicks {
        rotate: true,
        step: (line / cell_w.max(1.0)).ceil().max(1.0) as usize,
        area: widest + 40,
    }
}

/// One problem's parameter grid, coloured by performance, with a colour bar;
/// the best cell is framed black, the analytic default red. Cell values are
/// written in the cells only when the widest fits its cell.
pub fn heatmap(h: &Heatmap) -> Result<String> {
    let (nx, ny) = (h.x_values.len().max(1), h.y_values.len().max(1));
    let cell_h = (420 / ny as u32).clamp(22, 44);
    let y_label_w = h
        .y_values
        .iter()
        .map(|v| text_width(&tick_text(v), 12))
        .max()
        .unwrap_or(20)
        .clamp(20, 200)
        + 50;
    // The grid's width: the main area less its margins and the y labels.
    let grid_w = f64::from(WIDTH - 130 - 32 - y_label_w);
    let cell_w = grid_w / nx as f64;
    let ticks = x_ticks(&h.x_values, cell_w);
    let height = 74 + ticks.area + cell_h * ny as u32;
    let widest_cell = h
        .cells
        .iter()
        .flatten()
        .map(|c| text_width(&c.map_or("—".to_string(), fmt_num), 11))
        .max()
        .unwrap_or(0);
    let annotate = f64::from(widest_cell) + 6.0 <= cell_w;
    svg("heatmap", (WIDTH, height), |root| {
        let e = plot_err("heatmap");
        let (main, bar) = root.split_horizontally(WIDTH - 130);
        let mut chart = ChartBuilder::on(&main)
            .margin(16)
            .x_label_area_size(ticks.area)
            .y_label_area_size(y_label_w)
            .build_cartesian_2d(0f64..nx as f64, 0f64..ny as f64)
            .map_err(&e)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .set_all_tick_mark_size(0)
            .x_desc(h.x_name.clone())
            .y_desc(h.y_name.clone())
            .axis_desc_style((FONT, 15))
            .draw()
            .map_err(&e)?;
        for (yi, row) in h.cells.iter().enumerate() {
            for (xi, cell) in row.iter().enumerate() {
                let (x, y) = (xi as f64, yi as f64);
                let fill = match cell {
                    Some(v) => viridis(scale(h, *v)),
                    None => RGBColor(225, 225, 225),
                };
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x, y), (x + 1.0, y + 1.0)],
                        fill.filled(),
                    )))
                    .map_err(&e)?;
                if annotate {
                    let (text, ink) = match cell {
                        Some(v) => {
                            let bright = scale(h, *v) > 0.6;
                            (fmt_num(*v), if bright { BLACK } else { WHITE })
                        }
                        None => ("—".to_string(), RGBColor(90, 90, 90)),
                    };
                    chart
                        .draw_series(std::iter::once(Text::new(
                            text,
                            (x + 0.5, y + 0.5),
                            text_style(11, Pos::new(HPos::Center, VPos::Center)).color(&ink),
                        )))
                        .map_err(&e)?;
                }
            }
        }
        for (cell, c, w) in [(h.default, RGBColor(220, 30, 30), 3), (h.best, BLACK, 3)] {
            if let Some((xi, yi)) = cell {
                let (x, y) = (xi as f64, yi as f64);
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x + 0.04, y + 0.04), (x + 0.96, y + 0.96)],
                        c.stroke_width(w),
                    )))
                    .map_err(&e)?;
            }
        }
        for (xi, v) in h.x_values.iter().enumerate().step_by(ticks.step) {
            let (px, py) = chart.backend_coord(&(xi as f64 + 0.5, 0.0));
            let style = if ticks.rotate {
                text_style(12, Pos::new(HPos::Left, VPos::Center))
                    .transform(FontTransform::Rotate90)
            } else {
                text_style(12, Pos::new(HPos::Center, VPos::Top))
            };
            root.draw(&Text::new(tick_text(v), (px, py + 6), style))
                .map_err(&e)?;
        }
        for (yi, v) in h.y_values.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(0.0, yi as f64 + 0.5));
            root.draw(&Text::new(
                tick_text(v),
                (px - 6, py),
                text_style(12, Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(&e)?;
        }
        // Colour bar with the metric's unit.
        let (lo, hi) = h.range().unwrap_or((0.0, 1.0));
        let (lo, hi) = if hi > lo {
            (lo, hi)
        } else {
            (lo - 0.5, hi + 0.5)
        };
        let mut cb = ChartBuilder::on(&bar)
            .margin_top(16)
            .margin_bottom(72)
            .margin_right(8)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..1f64, lo..hi)
            .map_err(&e)?;
        cb.configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(6)
            .y_desc(format!("{} (best)", h.metric.unit()))
            .axis_desc_style((FONT, 13))
            .label_style((FONT, 11))
            .y_label_formatter(&|v| fmt_axis(*v))
            .draw()
            .map_err(&e)?;
        let steps = 48;
        cb.draw_series((0..steps).map(|i| {
            let a = lo + (hi - lo) * i as f64 / steps as f64;
            let b = lo + (hi - lo) * (i + 1) as f64 / steps as f64;
            let t = (i as f64 + 0.5) / steps as f64;
            let t = if h.metric.higher_is_better() {
                t
            } else {
                1.0 - t
            };
            Rectangle::new([(0.0, a), (1.0, b)], viridis(t).filled())
        }))
        .map_err(&e)?;
        Ok(())
    })
}

// ---- PMU ---------------------------------------------------------------------------

/// Hardware metrics per candidate (numbered as in the table): IPC on the
/// left, shares (miss rates, stalls, SIMD) as grouped bars on the right.
/// `None` when the table has no hardware metric to draw.
pub fn pmu(t: &PmuTable) -> Result<Option<String>> {
    let ipc_col = t.columns.iter().position(|c| c.key == "ipc");
    let shares: Vec<usize> = t
        .columns
        .iter()
        .enumerate()
        // Top-down fractions stay in the table: nine bars per candidate
        // would not be readable.
        .filter(|(_, c)| c.hardware && c.fraction && !c.key.starts_with("topdown."))
        .map(|(i, _)| i)
        .collect();
    if !t.hardware || t.rows.is_empty() || (ipc_col.is_none() && shares.is_empty()) {
        return Ok(None);
    }
    let n = t.rows.len();
    svg("pmu", (WIDTH, 420), |root| {
        let e = plot_err("pmu");
        let (left, right) = root.split_horizontally(320);
        if let Some(col) = ipc_col {
            let max = t
                .rows
                .iter()
                .filter_map(|r| r.values[col])
                .fold(0.5, f64::max)
                * 1.2;
            let mut chart = ChartBuilder::on(&left)
                .margin(16)
                .x_label_area_size(50)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..n as f64, 0f64..max)
                .map_err(&e)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .x_desc("candidate (table row)")
                .y_desc("instructions per cycle")
                .axis_desc_style((FONT, 14))
                .label_style((FONT, 12))
                .y_label_formatter(&|v| fmt_num(*v))
                .draw()
                .map_err(&e)?;
            chart
                .draw_series(t.rows.iter().enumerate().filter_map(|(i, r)| {
                    let v = r.values[col]?;
                    Some(Rectangle::new(
                        [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, v)],
                        color(0).filled(),
                    ))
                }))
                .map_err(&e)?;
            for i in 0..n {
                let (px, py) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
                root.draw(&Text::new(
                    format!("{}", i + 1),
                    (px, py + 5),
                    text_style(12, Pos::new(HPos::Center, VPos::Top)),
                ))
                .map_err(&e)?;
            }
        }
        if !shares.is_empty() {
            // The legend gets its own strip above the bars so it never covers them.
            let (legend, bars) = right.split_vertically(40);
            let mut chart = ChartBuilder::on(&bars)
                .margin(16)
                .margin_top(4)
                .x_label_area_size(50)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..n as f64, 0f64..100f64)
                .map_err(&e)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .x_desc("candidate (table row)")
                .y_desc("share (%)")
                .axis_desc_style((FONT, 14))
                .label_style((FONT, 12))
                .y_label_formatter(&|v| fmt_axis(*v))
                .draw()
                .map_err(&e)?;
            let k = shares.len() as f64;
            let mut lx = 70;
            for (j, &col) in shares.iter().enumerate() {
                let c = color(j + 1);
                let w = 0.8 / k;
                chart
                    .draw_series(t.rows.iter().enumerate().filter_map(|(i, r)| {
                        let v = r.values[col]? * 100.0;
                        let x = i as f64 + 0.1 + w * j as f64;
                        Some(Rectangle::new([(x, 0.0), (x + w, v)], c.filled()))
                    }))
                    .map_err(&e)?;
                let label = t.columns[col].header;
                legend
                    .draw(&Rectangle::new([(lx, 18), (lx + 12, 30)], c.filled()))
                    .map_err(&e)?;
                legend
                    .draw(&Text::new(
                        label.to_string(),
                        (lx + 16, 24),
                        text_style(12, Pos::new(HPos::Left, VPos::Center)),
                    ))
                    .map_err(&e)?;
                lx += 16 + text_width(label, 12) as i32 + 14;
            }
            for i in 0..n {
                // backend_coord is in the root's pixels.
                let (px, py) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
                root.draw(&Text::new(
                    format!("{}", i + 1),
                    (px, py + 5),
                    text_style(12, Pos::new(HPos::Center, VPos::Top)),
                ))
                .map_err(&e)?;
            }
        }
        Ok(())
    })
    .map(Some)
}

// ---- peers -------------------------------------------------------------------------

/// Grouped bars of tokens/s per (test, threads), one colour per engine, with
/// ±1 standard deviation whiskers; log scale when the values span more than
/// 30×.
pub fn peers(p: &PeerChart) -> Result<String> {
    let vals: Vec<f64> = p
        .values
        .iter()
        .flatten()
        .flatten()
        .map(|v| v.0)
        .filter(|v| *v > 0.0)
        .collect();
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(0.0, f64::max);
    let log = lo.is_finite() && hi / lo > 30.0;
    let ng = p.groups.len().max(1) as f64;
    svg("peers", (WIDTH, 480), |root| {
        let e = plot_err("peers");
        let mut b = ChartBuilder::on(root);
        b.margin(16).x_label_area_size(60).y_label_area_size(80);
        if log {
            let y0 = 10f64.powf(lo.log10().floor());
            let y1 = 10f64.powf((hi * 1.5).log10().ceil());
            let chart = b
                .build_cartesian_2d(0f64..ng, (y0..y1).log_scale())
                .map_err(&e)?;
            peer_bars(root, chart, p, y0, "tokens/s (log scale)")
        } else {
            let chart = b
                .build_cartesian_2d(0f64..ng, 0f64..hi.max(1.0) * 1.25)
                .map_err(&e)?;
            peer_bars(root, chart, p, 0.0, "tokens/s")
        }
    })
}

fn peer_bars<'a, 'b: 'a, Y: Ranged<ValueType = f64> + ValueFormatter<f64>>(
    root: &DrawingArea<SVGBackend<'b>, Shift>,
    mut chart: ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>,
    p: &PeerChart,
    base: f64,
    y_desc: &str,
) -> Result<()> {
    let e = plot_err("peers");
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .set_tick_mark_size(LabelAreaPosition::Bottom, 0)
        .x_desc("test · threads")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .y_label_formatter(&|v| fmt_axis(*v))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(&e)?;
    let k = p.engines.len().max(1) as f64;
    let w = 0.8 / k;
    for (j, engine) in p.engines.iter().enumerate() {
        let c = color(j);
        let bars: Vec<(f64, f64, Option<f64>)> = p
            .values
            .iter()
            .enumerate()
            .filter_map(|(g, row)| {
                let (v, sd) = row.get(j).copied().flatten()?;
                // A zero has no place on a log axis; the table still lists it.
                if base > 0.0 && v <= 0.0 {
                    return None;
                }
                Some((g as f64 + 0.1 + w * j as f64, v, sd))
            })
            .collect();
        chart
            .draw_series(
                bars.iter()
                    .map(|&(x, v, _)| Rectangle::new([(x, base), (x + w, v)], c.filled())),
            )
            .map_err(&e)?
            .label(engine.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        for &(x, v, sd) in &bars {
            let Some(sd) = sd.filter(|s| *s > 0.0) else {
                continue;
            };
            let xc = x + w / 2.0;
            let (a, b) = ((v - sd).max(base.max(f64::MIN_POSITIVE)), v + sd);
            let ink = BLACK.stroke_width(1);
            chart
                .draw_series([
                    PathElement::new([(xc, a), (xc, b)], ink),
                    PathElement::new([(xc - w / 4.0, a), (xc + w / 4.0, a)], ink),
                    PathElement::new([(xc - w / 4.0, b), (xc + w / 4.0, b)], ink),
                ])
                .map_err(&e)?;
        }
        chart
            .draw_series(bars.iter().map(|&(x, v, sd)| {
                // Above the whisker, so the number stays readable.
                Text::new(
                    fmt_num(v),
                    (x + w / 2.0, v + sd.unwrap_or(0.0).max(0.0)),
                    text_style(11, Pos::new(HPos::Center, VPos::Bottom)),
                )
            }))
            .map_err(&e)?;
    }
    for (g, label) in p.groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(g as f64 + 0.5, base));
        root.draw(&Text::new(
            label.clone(),
            (px, py + 8),
            text_style(13, Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(&e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(&e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_speedup_axis_is_centred_on_one_and_wide_enough_for_small_gains() {
        // All near 1×: the half-axis is ln 1.1, so 1.02× is a fifth of it.
        let span = speedup_span([1.0, 1.02].into_iter());
        assert!((span - 1.1f64.ln()).abs() < 1e-12);
        assert!(1.02f64.ln() / span > 0.2);
        // A 2× gain and a 0.25× loss: the loss is the wider, with room for its label.
        let span = speedup_span([2.0, 0.25, f64::NAN].into_iter());
        assert!((span - 1.25 * 4f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn heatmap_x_labels_turn_when_they_do_not_fit_and_thin_out_when_crowded() {
        let short: Vec<String> = ["1", "2", "4"].map(String::from).to_vec();
        assert_eq!(
            x_ticks(&short, 100.0),
            XTicks {
                rotate: false,
                step: 1,
                area: 56
            }
        );
        let long: Vec<String> = vec!["neon_dotprod.qgemm".into(); 4];
        let t = x_ticks(&long, 60.0);
        assert!(t.rotate && t.step == 1 && t.area >= text_width("neon_dotprod.qgemm", 12));
        assert_eq!(x_ticks(&long, 5.0).step, 4);
        assert_eq!(tick_text(&"x".repeat(40)).chars().count(), MAX_TICK_CHARS);
    }
}
