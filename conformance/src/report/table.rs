//! The report as a markdown table (also what the suite prints).

use super::{CaseReport, Outcome};

const HEADER: &str = "| case | contract | result | checks | handover ms | failover ms | expiry ms | overlaps | stale refused | stale accepted | writes/change | requests/change | deletion noticed ms | notes |\n\
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn count(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// One report as a markdown table row.
pub fn row(r: &CaseReport) -> String {
    let result = match &r.outcome {
        Outcome::Pass => "pass".to_owned(),
        Outcome::Recorded => format!("recorded ({} not promised)", r.violations.len()),
        Outcome::Fail(why) => format!("**FAIL**: {why}"),
        Outcome::Skipped(why) => format!("skipped: {why}"),
    };
    let mut notes: Vec<String> = r
        .violations
        .iter()
        .map(|v| {
            format!(
                "{}{}: {}",
                v.property,
                if v.promised { "" } else { " (not promised)" },
                v.detail
            )
        })
        .collect();
    notes.extend(r.notes.iter().cloned());
    let f = &r.figures;
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.case,
        r.contract,
        cell(&result),
        r.checks_passed,
        ms(f.handover_ms),
        ms(f.failover_ms),
        ms(f.expiry_ms),
        count(f.overlaps),
        count(f.stale_writes_refused),
        count(f.stale_writes_accepted),
        f.writes_per_change
            .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
        f.requests_per_change
            .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
        ms(f.deletion_noticed_ms),
        cell(&notes.join("; ")),
    )
}

/// A whole run as markdown: a title, a summary line and the table.
pub fn markdown(backend: &str, reports: &[CaseReport]) -> String {
    let count = |p: fn(&Outcome) -> bool| reports.iter().filter(|r| p(&r.outcome)).count();
    let servers = reports
        .iter()
        .find_map(|r| r.server.as_deref())
        .map_or_else(String::new, |s| format!("Servers: {s}.\n\n"));
    let mut out = format!(
        "# tenure conformance: {backend}\n\n{servers}{} cases: {} pass, {} recorded, {} fail, {} skipped\n\n{HEADER}",
        reports.len(),
        count(|o| matches!(o, Outcome::Pass)),
        count(|o| matches!(o, Outcome::Recorded)),
        count(|o| matches!(o, Outcome::Fail(_))),
        count(|o| matches!(o, Outcome::Skipped(_))),
    );
    for r in reports {
        out.push_str(&row(r));
        out.push('\n');
    }
    out
}
