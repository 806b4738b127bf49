import ServiceLifecycle
import UnixSignals

/// Reloads on each SIGHUP (`systemctl reload`, `kill -HUP`), until graceful shutdown.
struct ReloadSignals: Service {
    let reloader: Reloader
    /// SIGHUP, trapped at start-up (before READY=1): signals that came before this service ran wait in it.
    let signals: UnixSignalsSequence

    func run() async {
        await cancelWhenGracefulShutdown {
            for await _ in signals {
                // A failure is logged by the reloader, and the running configuration stays.
                _ = try? reloader.reload(trigger: "SIGHUP")
            }
        }
    }
}
