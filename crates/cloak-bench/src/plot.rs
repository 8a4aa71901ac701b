//! Charts people look at instead of tables: PNG or SVG, chosen by the file's extension.
//!
//! - [`schemes`]: throughput and latency of each scheme in one run, side by side;
//! - [`sweep`]: throughput, latency and batch utilisation against a swept parameter, one line per
//!   scheme (the shape of the Cloak paper's Figures 4–7);
//! - [`reuse_distances`]: a trace's reuse-distance histogram with its Zipf fit (Figures 2–3).
//!
//! Text is drawn with a TrueType font found on the system (DejaVu Sans, or `CLOAK_FONT`).

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;

use crate::report::Measurement;

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error(
        "plotting needs a TrueType font: install one (Debian: fonts-dejavu-core) or set \
         CLOAK_FONT to a .ttf file"
    )]
    NoFont,
    #[error("cannot draw {path}: {reason}")]
    Draw { path: String, reason: String },
    #[error("nothing to plot: {0}")]
    Empty(&'static str),
}

const FONT_FILES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Registers a system font as "sans-serif" once.
fn font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        let candidates = std::env::var("CLOAK_FONT")
            .into_iter()
            .chain(FONT_FILES.iter().map(|s| s.to_string()));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                // Plotters keeps fonts for the life of the program.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    });
    if ok { Ok(()) } else { Err(PlotError::NoFont) }
}

/// Something that draws itself on any backend (other crates' charts too, with [`save`]).
pub trait Figure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Draws `figure` into `path` (SVG or PNG by the extension) at `size` pixels.
pub fn save(figure: &impl Figure, path: &Path, size: (u32, u32)) -> Result<(), PlotError> {
    font()?;
    let failed = |reason: String| PlotError::Draw {
        path: path.display().to_string(),
        reason,
    };
    let svg = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if svg {
        let area = SVGBackend::new(path, size).into_drawing_area();
        figure.draw(&area).map_err(failed)?;
        area.present().map_err(|e| failed(e.to_string()))
    } else {
        let area = BitMapBackend::new(path, size).into_drawing_area();
        figure.draw(&area).map_err(failed)?;
        area.present().map_err(|e| failed(e.to_string()))
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// A bar chart of one value per scheme, one bar per series.
pub fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    unit: &str,
    names: &[String],
    series: &[(&str, Vec<f64>)],
) -> Result<(), String> {
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let n = names.len();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round() as usize;
            if (x - i as f64).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(unit)
        .y_label_formatter(&|y| compact(*y))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(err)?;
    let width = 0.7 / series.len() as f64;
    for (s, (label, values)) in series.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        let left = |i: usize| i as f64 - 0.35 + s as f64 * width;
        chart
            .draw_series(values.iter().enumerate().map(|(i, &v)| {
                Rectangle::new(
                    [(left(i), 0.0), (left(i) + width * 0.92, v)],
                    color.filled(),
                )
            }))
            .map_err(err)?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

struct Schemes<'a>(&'a [Measurement]);

impl Figure for Schemes<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        area.fill(&WHITE).map_err(err)?;
        let panes = area.split_evenly((1, 2));
        let names: Vec<String> = self.0.iter().map(|m| m.scheme.clone()).collect();
        let throughput = self.0.iter().map(|m| m.throughput.unwrap_or(0.0)).collect();
        bars(
            &panes[0],
            "Throughput",
            "operations per second",
            &names,
            &[("ops/s", throughput)],
        )?;
        let ms = |f: fn(&Measurement) -> u64| self.0.iter().map(|m| f(m) as f64 / 1000.0).collect();
        bars(
            &panes[1],
            "Latency",
            "milliseconds",
            &names,
            &[
                ("p50", ms(|m| m.latency_us.p50)),
                ("p95", ms(|m| m.latency_us.p95)),
                ("p99", ms(|m| m.latency_us.p99)),
            ],
        )
    }
}

/// Throughput and latency per scheme, side by side.
pub fn schemes(results: &[Measurement], path: &Path) -> Result<(), PlotError> {
    if results.is_empty() {
        return Err(PlotError::Empty("no results"));
    }
    save(&Schemes(results), path, (1400, 600))
}

/// A line per scheme of `value` against the swept parameter.
fn lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    unit: &str,
    parameter: &str,
    results: &[Measurement],
    value: fn(&Measurement) -> Option<f64>,
) -> Result<(), String> {
    let swept: Vec<f64> = results
        .iter()
        .filter_map(|m| Some(m.parameter.as_ref()?.1))
        .collect();
    // Values spanning orders of magnitude (keys 10K → 10M) are spaced by their logarithm.
    let (lo, hi) = span(&swept);
    let log = lo > 0.0 && hi / lo >= 100.0;
    let at = |x: f64| if log { x.log10() } else { x };
    let points = |scheme: &str| -> Vec<(f64, f64)> {
        results
            .iter()
            .filter(|m| m.scheme == scheme)
            .filter_map(|m| Some((at(m.parameter.as_ref()?.1), value(m)?)))
            .collect()
    };
    let schemes = schemes_in(results);
    let xs: Vec<f64> = swept.into_iter().map(at).collect();
    let ys: Vec<f64> = results.iter().filter_map(value).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(72)
        .build_cartesian_2d(range(&xs, false), range(&ys, true))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(if log {
            format!("{parameter} (log scale)")
        } else {
            parameter.to_string()
        })
        .y_desc(unit)
        .x_label_formatter(&|x| match log {
            // Only the powers of ten: 10k, 100k, 1M, not 31.62k.
            true if (x - x.round()).abs() > 1e-6 => String::new(),
            true => compact(10f64.powf(x.round())),
            false => compact(*x),
        })
        .y_label_formatter(&|y| compact(*y))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (s, scheme) in schemes.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        let pts = points(scheme);
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(*scheme)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Each scheme once, in the order of the run (a sweep measures every scheme once per value).
fn schemes_in(results: &[Measurement]) -> Vec<&str> {
    let mut schemes: Vec<&str> = Vec::new();
    for m in results {
        if !schemes.contains(&m.scheme.as_str()) {
            schemes.push(&m.scheme);
        }
    }
    schemes
}

/// A tick label people read at a glance: 400k, 1.5M, 0.25.
fn compact(v: f64) -> String {
    let short = |v: f64| {
        let text = format!("{v:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    match v.abs() {
        a if a >= 1e6 => format!("{}M", short(v / 1e6)),
        a if a >= 1e3 => format!("{}k", short(v / 1e3)),
        _ => short(v),
    }
}

/// The smallest and largest of `values` (infinite when there are none).
fn span(values: &[f64]) -> (f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// The span of `values` with a margin, from zero if `from_zero`.
fn range(values: &[f64], from_zero: bool) -> Range<f64> {
    let (lo, hi) = span(values);
    if !lo.is_finite() || !hi.is_finite() {
        return 0.0..1.0;
    }
    let lo = if from_zero { lo.min(0.0) } else { lo };
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.05).max(1e-9);
    (if from_zero { lo } else { lo - pad })..hi + pad
}

struct Sweep<'a>(&'a [Measurement], &'a str);

impl Figure for Sweep<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        area.fill(&WHITE).map_err(err)?;
        let panes = area.split_evenly((2, 2));
        let (results, parameter) = (self.0, self.1);
        lines(&panes[0], "Throughput", "ops/s", parameter, results, |m| {
            m.throughput
        })?;
        lines(&panes[1], "Mean latency", "ms", parameter, results, |m| {
            Some(m.latency_us.mean / 1000.0)
        })?;
        lines(
            &panes[2],
            "Batch utilisation",
            "real / all slots",
            parameter,
            results,
            |m| m.utilisation,
        )?;
        lines(
            &panes[3],
            "Storage traffic per operation",
            "bytes",
            parameter,
            results,
            |m| m.storage_bytes_per_op,
        )
    }
}

/// Throughput, latency and utilisation against the swept parameter.
pub fn sweep(results: &[Measurement], parameter: &str, path: &Path) -> Result<(), PlotError> {
    if results.is_empty() {
        return Err(PlotError::Empty("no results"));
    }
    save(&Sweep(results, parameter), path, (1400, 900))
}

struct ReuseDistances<'a> {
    counts: &'a [(u64, u64)],
    exponent: f64,
    scale: f64,
    title: &'a str,
}

impl Figure for ReuseDistances<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        area.fill(&WHITE).map_err(err)?;
        let max_d = self.counts.iter().map(|(d, _)| *d).max().unwrap_or(1) as f64;
        let max_c = self.counts.iter().map(|(_, c)| *c).max().unwrap_or(1) as f64;
        let mut chart = ChartBuilder::on(area)
            .caption(self.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (1f64..max_d * 1.5).log_scale(),
                (0.5f64..max_c * 2.0).log_scale(),
            )
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("reuse distance d (accesses in between)")
            .y_desc("access pairs")
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                self.counts
                    .iter()
                    .map(|&(d, c)| Circle::new((d as f64, c as f64), 2, PALETTE[0].filled())),
            )
            .map_err(err)?
            .label("trace")
            .legend(|(x, y)| Circle::new((x + 8, y), 4, PALETTE[0].filled()));
        let fit: Vec<(f64, f64)> = (0..200)
            .map(|i| {
                let d = max_d.powf(i as f64 / 199.0);
                (d, self.scale * d.powf(-self.exponent))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(fit, PALETTE[1].stroke_width(2)))
            .map_err(err)?
            .label(format!("Zipf fit, s = {:.2}", self.exponent))
            .legend(|(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], PALETTE[1].stroke_width(2))
            });
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

/// A reuse-distance histogram (`(d, pairs)`) on log-log axes with the fitted `scale · d^-s`.
pub fn reuse_distances(
    counts: &[(u64, u64)],
    exponent: f64,
    scale: f64,
    title: &str,
    path: &Path,
) -> Result<(), PlotError> {
    if counts.is_empty() {
        return Err(PlotError::Empty("the trace has no repeated key"));
    }
    save(
        &ReuseDistances {
            counts,
            exponent,
            scale,
            title,
        },
        path,
        (1000, 700),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Counters, Mode, Subject, Timing};

    fn measurement(scheme: &str, keys: u64) -> Measurement {
        let subject = Subject {
            scheme: scheme.into(),
            mode: Mode::Sockets,
            workload: "w".into(),
            keys,
        };
        let timing = Timing {
            ops: 10,
            errors: 0,
            seconds: 1.0,
        };
        let latency = hdrhistogram::Histogram::new(3).unwrap();
        Measurement::new(subject, timing, &latency, Counters::default(), None)
    }

    #[test]
    fn a_sweep_names_each_scheme_once() {
        let results: Vec<Measurement> = [1000, 10_000]
            .into_iter()
            .flat_map(|keys| [measurement("cloak", keys), measurement("unsafe", keys)])
            .collect();
        assert_eq!(schemes_in(&results), ["cloak", "unsafe"]);
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(compact(400_000.0), "400k");
        assert_eq!(compact(1_500_000.0), "1.5M");
        assert_eq!(compact(0.25), "0.25");
        assert_eq!(compact(0.0), "0");
    }
}
