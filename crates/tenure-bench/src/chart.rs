//! The SVG chart: graceful hand-over, and crash failover as the absolute
//! time from SIGKILL to the standby leading (p50 bars, p99 ticks), per
//! server and system, each panel on a log scale of its own.
//!
//! Failover is plotted kill → lead, not less the TTL as its table shows:
//! failover − TTL is mostly negative (the TTL runs from the last renewal),
//! which a log axis cannot show.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::deploy::BenchResult;
use crate::figures::{Figure, Measure};

const ROW: u32 = 18;
const LABEL_W: u32 = 430;
const PANEL_W: u32 = 400;
/// Space left free on each side of a panel's axis, so that the tick labels
/// of neighbouring panels (centred on their ticks) stay apart.
const PANEL_PAD: u32 = 30;
/// The first row's top.
const TOP: i32 = 60;

/// One panel: which measure, its title, and how a figure's value is plotted.
struct Panel {
    measure: Measure,
    title: &'static str,
    /// The value to plot from a figure's p50 or p99 (`None`: not plotted).
    value: fn(&Figure, Option<f64>) -> Option<f64>,
}

const PANELS: [Panel; 2] = [
    Panel {
        measure: Measure::Handover,
        title: "Graceful hand-over: resign → standby leads (ms, log)",
        value: |_, v| v,
    },
    Panel {
        measure: Measure::Failover,
        title: "Crash failover: SIGKILL → standby leads (ms, log)",
        // The table's figure is less the TTL; the chart adds it back.
        value: |f, v| Some(v? + f.ttl_ms.unwrap_or(0.0)),
    },
];

/// A log axis from `lo` to `hi` (whole decades, ms) over `width` pixels from `x0`.
#[derive(Clone, Copy, Debug)]
struct Axis {
    x0: i32,
    width: f64,
    lo: f64,
    hi: f64,
}

impl Axis {
    /// The decades around every positive value in `values`; 1 ms to 1 s if none.
    fn covering(x0: i32, width: f64, values: impl IntoIterator<Item = f64>) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.into_iter().filter(|v| *v > 0.0) {
            lo = lo.min(v.log10().floor());
            hi = hi.max(v.log10().ceil());
        }
        if !lo.is_finite() {
            (lo, hi) = (0.0, 3.0);
        }
        if hi <= lo {
            hi = lo + 1.0;
        }
        Axis { x0, width, lo, hi }
    }

    /// The pixel of `v` ms (values below the axis sit at its start).
    fn x(&self, v: f64) -> i32 {
        let at = (v.max(10f64.powf(self.lo)).log10() - self.lo) / (self.hi - self.lo);
        self.x0 + (at.min(1.0) * self.width).round() as i32
    }

    /// The decades, in ms.
    fn ticks(&self) -> impl Iterator<Item = f64> {
        (self.lo as i32..=self.hi as i32).map(|e| 10f64.powi(e))
    }
}

/// A tick's label: `0.1`, `10`, `1k`, `100k` (ms).
fn tick_label(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{}k", ms / 1000.0)
    } else {
        format!("{ms}")
    }
}

/// The rows: one per (server, system) with a figure in either panel.
fn rows(figures: &[Figure]) -> Vec<(String, String)> {
    let mut rows: Vec<(String, String)> = Vec::new();
    for f in figures {
        if PANELS.iter().any(|p| f.measure == Some(p.measure)) && f.p50_ms.is_some() {
            let key = (f.server.clone(), f.system.clone());
            if !rows.contains(&key) {
                rows.push(key);
            }
        }
    }
    rows
}

/// Each panel's axis, fitted to its figures.
fn axes(figures: &[Figure]) -> Vec<Axis> {
    PANELS
        .iter()
        .enumerate()
        .map(|(i, panel)| {
            let x0 = (LABEL_W + PANEL_W * i as u32 + PANEL_PAD) as i32;
            let width = (PANEL_W - 2 * PANEL_PAD) as f64;
            let values = figures
                .iter()
                .filter(|f| f.measure == Some(panel.measure))
                .flat_map(|f| [(panel.value)(f, f.p50_ms), (panel.value)(f, f.p99_ms)])
                .flatten();
            Axis::covering(x0, width, values)
        })
        .collect()
}

/// The bar colour: tenure, the protocol's floor, or a peer.
fn fill(system: &str) -> RGBColor {
    match system {
        "tenure" => RGBColor(40, 100, 180),
        crate::figures::FLOOR => RGBColor(60, 150, 80),
        _ => RGBColor(200, 120, 40),
    }
}

/// Renders the chart to an SVG document.
pub fn render(figures: &[Figure]) -> BenchResult<String> {
    let rows = rows(figures);
    let axes = axes(figures);
    let bottom = TOP + ROW as i32 * rows.len() as i32;
    let height = bottom as u32 + 30;
    let width = LABEL_W + PANEL_W * PANELS.len() as u32 + 10;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let text = ("sans-serif", 12).into_font();
        let title = ("sans-serif", 14).into_font();
        let draw = |e: DrawingAreaErrorKind<_>| e.to_string();
        root.draw(&Text::new(
            "tenure (blue), the protocol's floor (green) and peers (orange): p50 bars, p99 marks",
            (10, 10),
            title.clone(),
        ))
        .map_err(draw)?;
        for (i, (server, system)) in rows.iter().enumerate() {
            let y = TOP + ROW as i32 * i as i32;
            let color = if system == "tenure" {
                BLACK
            } else {
                RGBColor(90, 90, 90)
            };
            root.draw(&Text::new(
                format!("{server} · {system}"),
                (10, y),
                text.clone().color(&color),
            ))
            .map_err(draw)?;
        }
        let tick_font = ("sans-serif", 10)
            .into_font()
            .into_text_style(&root)
            .pos(Pos::new(HPos::Center, VPos::Top));
        for (panel, axis) in PANELS.iter().zip(&axes) {
            root.draw(&Text::new(panel.title, (axis.x0, 35), text.clone()))
                .map_err(draw)?;
            for tick in axis.ticks() {
                let x = axis.x(tick);
                root.draw(&PathElement::new(
                    vec![(x, TOP - 8), (x, bottom)],
                    RGBColor(220, 220, 220),
                ))
                .map_err(draw)?;
                root.draw(&Text::new(
                    tick_label(tick),
                    (x, bottom + 4),
                    tick_font.clone(),
                ))
                .map_err(draw)?;
            }
            for (i, (server, system)) in rows.iter().enumerate() {
                let Some(f) = figures.iter().find(|f| {
                    f.measure == Some(panel.measure) && &f.server == server && &f.system == system
                }) else {
                    continue;
                };
                let Some(p50) = (panel.value)(f, f.p50_ms) else {
                    continue;
                };
                let y = TOP + ROW as i32 * i as i32;
                root.draw(&Rectangle::new(
                    [(axis.x0, y + 1), (axis.x(p50), y + ROW as i32 - 5)],
                    fill(system).filled(),
                ))
                .map_err(draw)?;
                if let Some(p99) = (panel.value)(f, f.p99_ms) {
                    let x = axis.x(p99);
                    root.draw(&PathElement::new(
                        vec![(x, y), (x, y + ROW as i32 - 4)],
                        BLACK.stroke_width(2),
                    ))
                    .map_err(draw)?;
                }
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows like those of the published run (BENCHMARKS.md, 2026-12-01),
    /// and one made-up floor row for its colour: (measure, server, system,
    /// p50, p99, TTL ms for failover).
    fn published() -> Vec<Figure> {
        let h = Measure::Handover;
        let k = Measure::Failover;
        let rows: &[(Measure, &str, &str, f64, f64, f64)] = &[
            (h, "memory", "tenure", 0.25, 0.92, 0.0),
            (h, "etcd 1-node", "tenure", 3.54, 10.0, 0.0),
            (h, "etcd 1-node", "floor", 2.1, 3.5, 0.0),
            (h, "etcd 1-node", "etcd election API", 2.32, 4.0, 0.0),
            (h, "etcd 1-node", "etcdctl elect", 5.28, 7.92, 0.0),
            (h, "etcd 3-node", "tenure", 5.2, 10.0, 0.0),
            (h, "etcd 3-node", "etcd election API", 3.6, 6.87, 0.0),
            (h, "ZooKeeper 1-node", "tenure", 2.15, 5.08, 0.0),
            (
                h,
                "ZooKeeper 1-node",
                "Curator LeaderLatch 5.4",
                15.0,
                24.0,
                0.0,
            ),
            (h, "Kubernetes (etcd 1-node)", "tenure", 4.98, 9.33, 0.0),
            (h, "Redis 1-master", "tenure", 1.35, 1.65, 0.0),
            (h, "Redis 1-master", "rslock 0.10", 58.0, 181.0, 0.0),
            (k, "etcd 1-node", "tenure", -10.0, -7.9, 2000.0),
            (k, "etcd 1-node", "etcd election API", -16.0, -13.0, 2000.0),
            (k, "etcd 1-node", "etcdctl elect", -475.0, -475.0, 60_000.0),
            (k, "ZooKeeper 1-node", "tenure", -116.0, -113.0, 2000.0),
            (k, "ZooKeeper 3-node", "tenure", 24.0, 83.0, 2000.0),
            (
                k,
                "ZooKeeper 1-node",
                "Curator LeaderLatch 5.4",
                -278.0,
                -163.0,
                2000.0,
            ),
            (
                k,
                "Kubernetes (etcd 1-node)",
                "tenure",
                -493.0,
                -487.0,
                2000.0,
            ),
            (k, "Redis 1-master", "tenure", -502.0, -500.0, 2000.0),
            (k, "Redis 1-master", "rslock 0.10", -446.0, -330.0, 2000.0),
        ];
        rows.iter()
            .map(|&(m, server, system, p50, p99, ttl)| {
                let mut f = Figure::new(m, server, system);
                (f.p50_ms, f.p99_ms) = (Some(p50), Some(p99));
                f.ttl_ms = (m == k).then_some(ttl);
                f
            })
            .collect()
    }

    #[test]
    fn every_bar_and_p99_mark_is_inside_its_panel_and_failover_is_kill_to_lead() {
        let figures = published();
        let axes = axes(&figures);
        for f in &figures {
            let p = PANELS.iter().position(|p| f.measure == Some(p.measure));
            let (panel, axis) = (&PANELS[p.unwrap()], axes[p.unwrap()]);
            let p50 = (panel.value)(f, f.p50_ms).unwrap();
            let p99 = (panel.value)(f, f.p99_ms).unwrap();
            assert!(p50 > 0.0, "{} {}: {p50}", f.server, f.system);
            let (x50, x99) = (axis.x(p50), axis.x(p99));
            assert!(x50 > axis.x0 + 2, "{} {}: empty bar", f.server, f.system);
            assert!(x99 >= x50 && x99 <= axis.x0 + axis.width as i32);
        }
        let failover = &figures[12];
        assert_eq!((PANELS[1].value)(failover, failover.p50_ms), Some(1990.0));
    }

    #[test]
    fn neighbouring_panels_tick_labels_stay_apart() {
        let axes = axes(&published());
        // Sans-serif at 10 px: at most 7 px a character, centred on the tick.
        let half = |v: f64| tick_label(v).len() as i32 * 7 / 2;
        let left = &axes[0];
        let right = &axes[1];
        let last = left.ticks().last().unwrap();
        let first = right.ticks().next().unwrap();
        assert!(
            left.x(last) + half(last) + 4 < right.x(first) - half(first),
            "{} at {} runs into {} at {}",
            tick_label(last),
            left.x(last),
            tick_label(first),
            right.x(first)
        );
        // And no panel's labels run into each other.
        for axis in &axes {
            let ticks: Vec<f64> = axis.ticks().collect();
            for pair in ticks.windows(2) {
                assert!(axis.x(pair[0]) + half(pair[0]) < axis.x(pair[1]) - half(pair[1]));
            }
        }
    }

    /// Writes the chart of [`published`] to the temporary directory, to look
    /// at (`rsvg-convert`).
    #[test]
    fn the_chart_renders() {
        let svg = render(&published()).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("SIGKILL"));
        let path = std::env::temp_dir().join("tenure-bench-chart-test.svg");
        std::fs::write(&path, svg).unwrap();
    }
}
