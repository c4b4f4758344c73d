//! The SVG chart: hand-over and crash failover − TTL (p50 bars, p99 ticks)
//! per server and system, on a log scale.

use plotters::prelude::*;

use crate::deploy::BenchResult;
use crate::figures::{Figure, Measure};

const ROW: u32 = 18;
const LABEL_W: u32 = 430;
const PANEL_W: u32 = 330;

/// Renders the chart to an SVG document.
pub fn render(figures: &[Figure]) -> BenchResult<String> {
    let panels = [
        (Measure::Handover, "Graceful hand-over (ms, log scale)"),
        (
            Measure::Failover,
            "Crash failover: SIGKILL → standby leads (ms, log scale)",
        ),
    ];
    // One row per (server, system) with a figure in either panel.
    let mut rows: Vec<(String, String)> = Vec::new();
    for f in figures {
        if panels.iter().any(|(m, _)| f.measure == Some(*m)) && f.p50_ms.is_some() {
            let key = (f.server.clone(), f.system.clone());
            if !rows.contains(&key) {
                rows.push(key);
            }
        }
    }
    let height = 60 + ROW * rows.len().max(1) as u32 + 30;
    let width = LABEL_W + PANEL_W * 2 + 20;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let text = ("sans-serif", 12).into_font();
        let title = ("sans-serif", 14).into_font();
        let draw = |e: DrawingAreaErrorKind<_>| e.to_string();
        root.draw(&Text::new(
            "tenure and its peers: p50 bars, p99 marks",
            (10, 10),
            title.clone(),
        ))
        .map_err(draw)?;
        for (i, (server, system)) in rows.iter().enumerate() {
            let y = 60 + ROW as i32 * i as i32;
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
        // Log scale from 0.1 ms to 100 s.
        let (lo, hi) = (0.1f64.log10(), 100_000f64.log10());
        for (p, (measure, name)) in panels.iter().enumerate() {
            let x0 = (LABEL_W + PANEL_W * p as u32) as i32;
            let w = (PANEL_W - 20) as f64;
            let x_of = |v: f64| x0 + ((v.max(0.1).log10() - lo) / (hi - lo) * w) as i32;
            root.draw(&Text::new(*name, (x0, 35), text.clone()))
                .map_err(draw)?;
            for decade in [0.1, 1.0, 10.0, 100.0, 1000.0, 10_000.0, 100_000.0] {
                let x = x_of(decade);
                let bottom = 60 + ROW as i32 * rows.len() as i32;
                root.draw(&PathElement::new(
                    vec![(x, 52), (x, bottom)],
                    RGBColor(220, 220, 220),
                ))
                .map_err(draw)?;
                let label = if decade < 1.0 {
                    "0.1".to_owned()
                } else {
                    format!("{decade}")
                };
                root.draw(&Text::new(
                    label,
                    (x - 8, bottom + 4),
                    ("sans-serif", 10).into_font(),
                ))
                .map_err(draw)?;
            }
            for (i, (server, system)) in rows.iter().enumerate() {
                let Some(f) = figures.iter().find(|f| {
                    f.measure == Some(*measure) && &f.server == server && &f.system == system
                }) else {
                    continue;
                };
                let (Some(p50), p99) = (f.p50_ms, f.p99_ms) else {
                    continue;
                };
                let y = 60 + ROW as i32 * i as i32;
                let fill = if system == "tenure" {
                    RGBColor(40, 100, 180)
                } else {
                    RGBColor(200, 120, 40)
                };
                root.draw(&Rectangle::new(
                    [(x0, y + 1), (x_of(p50), y + ROW as i32 - 5)],
                    fill.filled(),
                ))
                .map_err(draw)?;
                if let Some(p99) = p99 {
                    let x = x_of(p99);
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
