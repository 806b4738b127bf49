/// Every metric keyholed exports (METRICS.md): its help text and, for histograms, its buckets. The
/// factory and the exporter take names from here only, so that each family has one help text, as
/// Prometheus's exposition format and promtool want.
public enum MetricsCatalogue {
    /// How a metric is exported.
    public enum Kind: Sendable {
        case counter
        case gauge
        case histogram([Duration])
    }

    /// Request-time buckets, from 10 µs.
    public static let requestBuckets: [Duration] = [
        .microseconds(10), .microseconds(25), .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
        .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5),
    ]

    /// Disk-time buckets: a sync or a snapshot takes from tens of microseconds to seconds.
    public static let diskBuckets: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .microseconds(2_500_000), .seconds(5), .seconds(10), .seconds(30),
    ]

    /// Name to help text and kind.
    public static let metrics: [String: (help: String, kind: Kind)] = [
        "keyholed_build_info": ("keyholed's version; always 1.", .gauge),
        "keyholed_requests_total": ("Requests on the main socket by operation and outcome (ok or the error code).", .counter),
        "keyholed_request_duration_seconds": ("Time from a request's frame to its answer, by operation.", .histogram(requestBuckets)),
        "keyholed_connections_open": ("Connections open on the main socket.", .gauge),
        "keyholed_connections_accepted_total": ("Connections accepted on the main socket.", .counter),
        "keyholed_connections_refused_total": ("Connections answered overloaded and closed, by reason.", .counter),
        "keyholed_frame_errors_total": ("Connections closed on a framing error.", .counter),
        "keyholed_slow_readers_total": ("Connections closed because their unsent answers passed max_unsent_bytes.", .counter),
        "keyholed_token_verifications_total": ("Identity token verifications by configured issuer and result.", .counter),
        "keyholed_verified_token_cache_hits_total": ("Token verifications answered from the verified-token cache.", .counter),
        "keyholed_verified_token_cache_misses_total": ("Token verifications the verified-token cache could not answer.", .counter),
        "keyholed_key_set_fetches_total": ("Fetches of remote key sets by issuer and result.", .counter),
        "keyholed_key_set_last_success_timestamp_seconds": ("When the issuer's key set was last fetched or read successfully (0: never).", .gauge),
        "keyholed_key_set_keys": ("Keys held for the issuer.", .gauge),
        "keyholed_users": ("Users stored.", .gauge),
        "keyholed_sessions": ("Sessions stored (live, or expired and not yet swept).", .gauge),
        "keyholed_sessions_created_total": ("Sessions created.", .counter),
        "keyholed_sessions_revoked_total": ("Sessions revoked by reason.", .counter),
        "keyholed_log_syncs_total": ("Write-ahead log syncs.", .counter),
        "keyholed_log_sync_duration_seconds": ("Time to write and sync one batch of the write-ahead log.", .histogram(diskBuckets)),
        "keyholed_log_bytes": ("Size of the write-ahead log.", .gauge),
        "keyholed_snapshots_total": ("Snapshots written.", .counter),
        "keyholed_snapshot_duration_seconds": ("Time to write one snapshot.", .histogram(diskBuckets)),
        "keyholed_storage_up": ("1 while changes are written, 0 while writing them fails.", .gauge),
        "keyholed_apple_refresh_checks_total": ("Sign in with Apple refresh-token checks by result.", .counter),
        "keyholed_apple_revocations_owed": ("Revocations waiting to be sent to Apple.", .gauge),
        "keyholed_apple_revocations_sent_total": ("Revocations Apple accepted.", .counter),
        "keyholed_apple_revocations_failed_total": ("Attempts to send a revocation to Apple that failed (retried later).", .counter),
        "keyholed_apple_notifications_total": ("Sign in with Apple server-to-server notifications accepted, by event type.", .counter),
        "keyholed_authz_answers_total": ("Answers of the HTTP listener's /authz by result.", .counter),
        "process_cpu_seconds_total": ("User and system CPU time spent, in seconds.", .counter),
        "process_resident_memory_bytes": ("Resident memory size, in bytes.", .gauge),
        "process_open_fds": ("Open file descriptors.", .gauge),
        "process_start_time_seconds": ("Start time of the process since 1970, in seconds.", .gauge),
    ]
}
