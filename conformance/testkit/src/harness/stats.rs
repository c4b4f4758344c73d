//! Server-side counters, for counting the writes a backend causes.

use std::collections::BTreeMap;

/// Counters read from one server. Keys by server:
///
/// - etcd: Prometheus series from `/metrics` whose value is a whole number,
///   keyed as printed (`etcd_mvcc_put_total`,
///   `etcd_server_proposals_committed_total`, `grpc_server_handled_total{...}`).
/// - ZooKeeper: the integer lines of `mntr` (`zk_packets_received`, ...) and
///   `zxid` from `srvr`.
/// - Redis: `INFO stats` fields (`total_commands_processed`, ...) and
///   `INFO commandstats` as `cmdstat_<command>.<field>` (`cmdstat_set.calls`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// The counters by name.
    pub counters: BTreeMap<String, u64>,
}

impl ServerStats {
    /// A counter's value, 0 when the server did not report it (Redis omits
    /// commands it has not run; etcd omits series it has not touched).
    pub fn get(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// How much each counter grew since `earlier` (saturating at 0).
    pub fn since(&self, earlier: &ServerStats) -> ServerStats {
        let counters = self
            .counters
            .iter()
            .map(|(k, v)| (k.clone(), v.saturating_sub(earlier.get(k))))
            .collect();
        ServerStats { counters }
    }

    /// etcd: the gRPC messages clients sent (every unary request, every
    /// message on a stream: a watch created or cancelled, ...), plus the
    /// watch events and answers the servers sent on watch streams; lease
    /// keep-alives (heartbeats) and the maintenance service (status probes)
    /// left out. Sum it over the cluster ([`Cluster::stats_total`](super::Cluster::stats_total)):
    /// each node counts the requests its own clients sent.
    pub fn etcd_requests(&self) -> u64 {
        self.counters
            .iter()
            .filter(|(series, _)| {
                let received = series.starts_with("grpc_server_msg_received_total{");
                let sent_on_watch = series.starts_with("grpc_server_msg_sent_total{")
                    && series.contains("grpc_method=\"Watch\"");
                (received
                    && !series.contains("grpc_method=\"LeaseKeepAlive\"")
                    && !series.contains("grpc_service=\"etcdserverpb.Maintenance\""))
                    || sent_on_watch
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// etcd: the `Authenticate` requests clients sent (each, when it
    /// succeeds, is also a raft proposal: a write). Sum it over the cluster.
    pub fn etcd_logins(&self) -> u64 {
        self.counters
            .iter()
            .filter(|(series, _)| {
                series.starts_with("grpc_server_msg_received_total{")
                    && series.contains("grpc_method=\"Authenticate\"")
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// Adds `other`'s counters into these (for totals over a cluster).
    pub fn add(&mut self, other: &ServerStats) {
        for (k, v) in &other.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
    }

    /// Parses a Prometheus text exposition, keeping `etcd_*` and `grpc_*`
    /// series with whole-number values.
    pub fn from_prometheus(text: &str) -> ServerStats {
        let mut counters = BTreeMap::new();
        for line in text.lines() {
            if line.starts_with('#') || !(line.starts_with("etcd_") || line.starts_with("grpc_")) {
                continue;
            }
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            if let Some(value) = whole(value) {
                counters.insert(series.to_string(), value);
            }
        }
        ServerStats { counters }
    }

    /// Parses ZooKeeper's `mntr` (tab-separated) and `srvr` (`Zxid: 0x..`).
    pub fn from_zookeeper(mntr: &str, srvr: &str) -> ServerStats {
        let mut counters: BTreeMap<String, u64> = mntr
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
            .collect();
        if let Some(zxid) = srvr
            .lines()
            .find_map(|l| l.strip_prefix("Zxid: 0x"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        {
            counters.insert("zxid".to_string(), zxid);
        }
        ServerStats { counters }
    }

    /// Parses Redis `INFO` output (`stats` and `commandstats` sections).
    pub fn from_redis_info(info: &str) -> ServerStats {
        let mut counters = BTreeMap::new();
        for line in info.lines() {
            let Some((key, value)) = line.trim_end().split_once(':') else {
                continue;
            };
            if key.starts_with("cmdstat_") {
                for field in value.split(',') {
                    if let Some((name, v)) = field.split_once('=') {
                        if let Some(v) = whole(v) {
                            counters.insert(format!("{key}.{name}"), v);
                        }
                    }
                }
            } else if let Ok(v) = value.parse() {
                counters.insert(key.to_string(), v);
            }
        }
        ServerStats { counters }
    }
}

/// A non-negative whole number written as an integer or a float (`1.2e+06`).
fn whole(text: &str) -> Option<u64> {
    if let Ok(v) = text.parse::<u64>() {
        return Some(v);
    }
    let v: f64 = text.parse().ok()?;
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < u64::MAX as f64).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_counters_are_parsed_and_fractions_skipped() {
        let text = "# HELP etcd_mvcc_put_total Total number of puts.\n\
                    # TYPE etcd_mvcc_put_total counter\n\
                    etcd_mvcc_put_total 7\n\
                    etcd_server_proposals_committed_total 1.2e+06\n\
                    etcd_disk_backend_commit_duration_seconds_sum 0.25\n\
                    grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Put\"} 3\n\
                    go_goroutines 40\n";
        let s = ServerStats::from_prometheus(text);
        assert_eq!(s.get("etcd_mvcc_put_total"), 7);
        assert_eq!(s.get("etcd_server_proposals_committed_total"), 1_200_000);
        assert_eq!(
            s.get("grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Put\"}"),
            3
        );
        assert!(!s
            .counters
            .contains_key("etcd_disk_backend_commit_duration_seconds_sum"));
        assert!(!s.counters.contains_key("go_goroutines"));
    }

    #[test]
    fn etcd_logins_count_authenticate_requests_only() {
        let text = "grpc_server_msg_received_total{grpc_method=\"Authenticate\",grpc_service=\"etcdserverpb.Auth\",grpc_type=\"unary\"} 3\n\
                    grpc_server_msg_sent_total{grpc_method=\"Authenticate\",grpc_service=\"etcdserverpb.Auth\",grpc_type=\"unary\"} 3\n\
                    grpc_server_msg_received_total{grpc_method=\"UserAdd\",grpc_service=\"etcdserverpb.Auth\",grpc_type=\"unary\"} 1\n\
                    grpc_server_msg_received_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 4\n";
        assert_eq!(ServerStats::from_prometheus(text).etcd_logins(), 3);
    }

    #[test]
    fn etcd_requests_count_client_messages_and_watch_events_but_not_keep_alives() {
        let text = "grpc_server_msg_received_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 4\n\
                    grpc_server_msg_received_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 2\n\
                    grpc_server_msg_received_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"etcdserverpb.Lease\",grpc_type=\"bidi_stream\"} 50\n\
                    grpc_server_msg_received_total{grpc_method=\"Status\",grpc_service=\"etcdserverpb.Maintenance\",grpc_type=\"unary\"} 9\n\
                    grpc_server_msg_sent_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 3\n\
                    grpc_server_msg_sent_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 4\n\
                    grpc_server_msg_sent_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"etcdserverpb.Lease\",grpc_type=\"bidi_stream\"} 50\n";
        assert_eq!(
            ServerStats::from_prometheus(text).etcd_requests(),
            4 + 2 + 3
        );
    }

    #[test]
    fn zookeeper_mntr_and_zxid_are_parsed() {
        let mntr = "zk_version\t3.8.0\nzk_packets_received\t12\nzk_avg_latency\t0.5\n";
        let srvr = "Zxid: 0x10000002a\nMode: leader\n";
        let s = ServerStats::from_zookeeper(mntr, srvr);
        assert_eq!(s.get("zk_packets_received"), 12);
        assert_eq!(s.get("zxid"), 0x1_0000_002a);
        assert!(!s.counters.contains_key("zk_version"));
        assert!(!s.counters.contains_key("zk_avg_latency"));
    }

    #[test]
    fn redis_commandstats_are_parsed_per_field() {
        let info = "# Stats\r\ntotal_commands_processed:9\r\n# Commandstats\r\n\
                    cmdstat_set:calls=3,usec=12,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n";
        let s = ServerStats::from_redis_info(info);
        assert_eq!(s.get("total_commands_processed"), 9);
        assert_eq!(s.get("cmdstat_set.calls"), 3);
        assert_eq!(s.get("cmdstat_set.usec_per_call"), 4);
        assert_eq!(s.get("cmdstat_get.calls"), 0);
    }

    #[test]
    fn since_subtracts_and_add_sums() {
        let mut a = ServerStats::from_redis_info("x:5\r\ny:1\r\n");
        let b = ServerStats::from_redis_info("x:2\r\n");
        assert_eq!(a.since(&b).get("x"), 3);
        assert_eq!(a.since(&b).get("y"), 1);
        a.add(&b);
        assert_eq!(a.get("x"), 7);
    }
}
