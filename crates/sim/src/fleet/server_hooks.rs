//! What the HTTP server does differently in front of a fleet: submit through the router,
//! answer 429 above a pool's rate limit, name the pool and replica in response headers, and
//! label `/metrics` per pool and replica.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use servebench_wire::protocol::{POOL_HEADER, REPLICA_HEADER};
use tokio::time::Instant;

use crate::engine::NewRequest;
use crate::prometheus::MetricsView;
use crate::realtime::{EngineHandle, Submitted};
use crate::server::{ApiError, AppState};

use super::realtime_fleet::{FleetEngines, FrontError, ServedLabels};

/// Routes and submits a request to the fleet.
pub async fn submit(
    fleet: &Arc<FleetEngines>,
    request: NewRequest,
    received: Instant,
) -> Result<(EngineHandle, Submitted, Option<ServedLabels>), ApiError> {
    submit_for(fleet, request, received, None).await
}

/// [`submit`] for a request of a session (the `--session-header` value `--router session`
/// keys on).
pub async fn submit_for(
    fleet: &Arc<FleetEngines>,
    request: NewRequest,
    received: Instant,
    session: Option<&str>,
) -> Result<(EngineHandle, Submitted, Option<ServedLabels>), ApiError> {
    match fleet.submit_for(request, received, session).await {
        Ok((engine, submitted, served)) => Ok((engine, submitted, Some(served))),
        Err(FrontError::RateLimited { pool }) => Err(ApiError::with_status(
            StatusCode::TOO_MANY_REQUESTS,
            format!("Rate limit of pool '{pool}' exceeded; retry later."),
        )),
        Err(FrontError::Stopped) => Err(ApiError::engine_stopped()),
    }
}

/// Where the inputs of one pooling request go: the engine the first was routed to, and the
/// labels the response names.
pub type PoolingRoute = Option<(EngineHandle, Option<ServedLabels>)>;

/// Submits one input of a pooling request (`/v1/embeddings`, `/v1/rerank`). The first input
/// goes through the fleet's router (the pool's rate limit, the replica the response headers
/// name); the others follow it to the same engine, as a gateway routes one HTTP request to
/// one replica. Without a fleet every input goes to the one engine.
pub async fn submit_pooling_input(
    fleet: Option<&Arc<FleetEngines>>,
    engine: &EngineHandle,
    route: &mut PoolingRoute,
    request: NewRequest,
    received: Instant,
) -> Result<(EngineHandle, Submitted), ApiError> {
    let to = match (route.as_ref(), fleet) {
        (Some((e, _)), _) => e.clone(),
        (None, Some(fleet)) => {
            let (e, submitted, served) = submit(fleet, request, received).await?;
            *route = Some((e.clone(), served));
            return Ok((e, submitted));
        }
        (None, None) => engine.clone(),
    };
    let submitted = to
        .submit(request, received)
        .await
        .map_err(|_| ApiError::engine_stopped())?;
    Ok((to, submitted))
}

/// Adds `x-servebench-pool` and `x-servebench-replica` to a response.
pub fn mark_served(resp: &mut Response, served: Option<&ServedLabels>) {
    let Some((pool, replica)) = served else {
        return;
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(pool) {
        h.insert(POOL_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(replica) {
        h.insert(REPLICA_HEADER, v);
    }
}

/// `/metrics` of every engine, labelled by pool and replica.
pub fn render_metrics(app: &AppState, fleet: &FleetEngines) -> String {
    let snaps: Vec<(String, String, Arc<crate::realtime::MetricsSnapshot>)> = fleet
        .engines()
        .map(|(p, r, h)| (p.to_owned(), r.to_owned(), h.metrics()))
        .collect();
    let views: Vec<(String, String, MetricsView<'_>)> = snaps
        .iter()
        .map(|(p, r, s)| (p.clone(), r.clone(), app.metrics_view(&s.engine, &s.driver)))
        .collect();
    super::metrics::render(&views)
}
