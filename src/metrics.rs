//! Prometheus metrics: requests by route and status, latencies by route, webhook deliveries by
//! outcome, runs by status, the run queue and run durations, run callbacks (sent, failed,
//! pending), the TLS certificate's expiry, ACME failures and the records housekeeping removed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: String,
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    /// Webhook deliveries by outcome: `dispatched`, `inactive`, `in_flight`, `cooldown`,
    /// `duplicate`, `unknown_trigger`, `invalid_token`, `invalid_key`, `bad_body`.
    pub deliveries: Family<OutcomeLabels, Counter>,
    /// Runs by status they reached: `queued` when created, then their final status.
    pub runs: Family<StatusLabels, Counter>,
    /// Runs waiting for a worker.
    pub run_queue: Gauge,
    /// Execution time of runs that reached a final status.
    pub run_duration: Histogram,
    /// `notAfter` of the TLS certificate in use, Unix seconds (0 without TLS).
    pub tls_cert_expiry: Gauge,
    /// ACME orders and cache operations that failed.
    pub acme_failures: Counter,
    /// Records housekeeping removed, by kind (`kennis_records_purged_total{kind}`).
    pub records_purged: Family<KindLabels, Counter>,
    /// Run callbacks a receiver answered with a 2xx.
    pub callbacks_sent: Counter,
    /// Run callbacks given up (every retry failed, or the URL was refused when sending).
    pub callbacks_failed: Counter,
    /// Run callbacks waiting for their next attempt.
    pub callbacks_pending: Gauge,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
    ])
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("kennis");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Family<RouteLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            latency.clone(),
        );
        let deliveries = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "hook_deliveries",
            "Webhook deliveries by outcome",
            deliveries.clone(),
        );
        let runs = Family::<StatusLabels, Counter>::default();
        registry.register(
            "runs",
            "Runs by status reached (queued when created)",
            runs.clone(),
        );
        let run_queue = Gauge::default();
        registry.register(
            "run_queue_length",
            "Runs waiting for a worker",
            run_queue.clone(),
        );
        let run_duration =
            Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 3600.0]);
        registry.register(
            "run_duration_seconds",
            "Execution time of finished runs",
            run_duration.clone(),
        );
        let tls_cert_expiry = Gauge::default();
        registry.register(
            "tls_certificate_expiry_timestamp_seconds",
            "When the TLS certificate in use expires (Unix seconds; 0 without TLS)",
            tls_cert_expiry.clone(),
        );
        let acme_failures = Counter::default();
        registry.register(
            "acme_failures",
            "ACME orders and certificate cache operations that failed",
            acme_failures.clone(),
        );
        let records_purged = Family::<KindLabels, Counter>::default();
        registry.register(
            "records_purged",
            "Records removed by housekeeping, by kind",
            records_purged.clone(),
        );
        let callbacks_sent = Counter::default();
        registry.register(
            "callbacks_sent",
            "Run callbacks a receiver answered with a 2xx",
            callbacks_sent.clone(),
        );
        let callbacks_failed = Counter::default();
        registry.register(
            "callbacks_failed",
            "Run callbacks given up after their last retry (or refused when sending)",
            callbacks_failed.clone(),
        );
        let callbacks_pending = Gauge::default();
        registry.register(
            "callbacks_pending",
            "Run callbacks waiting for their next attempt",
            callbacks_pending.clone(),
        );
        Metrics {
            registry,
            records_purged,
            callbacks_sent,
            callbacks_failed,
            callbacks_pending,
            tls_cert_expiry,
            acme_failures,
            requests,
            latency,
            deliveries,
            runs,
            run_queue,
            run_duration,
        }
    }

    /// Counts `n` records of `kind` removed by housekeeping.
    pub fn purged(&self, kind: &'static str, n: usize) {
        let counter = self.records_purged.get_or_create(&KindLabels { kind });
        if n > 0 {
            counter.inc_by(n as u64);
        }
    }

    /// Counts one webhook delivery.
    pub fn delivery(&self, outcome: &'static str) {
        self.deliveries
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts a run created (the queue gauge is counted by `App::enqueue`).
    pub fn run_created(&self) {
        self.runs
            .get_or_create(&StatusLabels { status: "queued" })
            .inc();
    }

    /// Counts a run that reached a final status (`requests::Status::as_str`) after `seconds`
    /// of execution.
    pub fn runs_finished(&self, status: &'static str, seconds: f64) {
        self.runs.get_or_create(&StatusLabels { status }).inc();
        self.run_duration.observe(seconds);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an encoder error would leave the text cut short.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics");
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
