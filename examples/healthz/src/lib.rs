//! `/healthz` for a tenure elector, as client-go's `HealthzAdaptor` serves
//! one for a Kubernetes liveness probe: 200 `ok` while
//! [`Health::check`](tenure::Health::check) passes (a follower, or a leader
//! whose last successful renewal is recent enough), else 503 with the
//! [`Unhealthy`](tenure::Unhealthy) text.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tenure::Elector;

/// What the `/healthz` handler needs.
#[derive(Clone, Debug)]
struct Probe {
    elector: Elector,
    max_renewal_age: Duration,
}

/// A router serving `GET /healthz` for `elector`: a leader whose last
/// successful renewal is older than `max_renewal_age` is unhealthy.
pub fn router(elector: Elector, max_renewal_age: Duration) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(Probe {
            elector,
            max_renewal_age,
        })
}

async fn healthz(State(probe): State<Probe>) -> (StatusCode, String) {
    match probe.elector.health().check(probe.max_renewal_age) {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(unhealthy) => (StatusCode::SERVICE_UNAVAILABLE, format!("{unhealthy}\n")),
    }
}
