//! A leader-election candidate driven over stdin/stdout (one JSON object
//! per line), for the conformance suite's process-level faults.
//!
//! Usage: `tenure-candidate URL KEY IDENTITY TTL_MS`; see
//! `tenure_conformance::process::protocol`.

fn main() {
    tenure_conformance::process::candidate::main_with(
        tenure_conformance::process::connect::connect,
    );
}
