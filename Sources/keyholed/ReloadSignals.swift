import ServiceLifecycle
import UnixSignals

/// Reloads on each SIGHUP (`systemctl reload`, `kill -HUP`), until graceful shutdown.
struct ReloadSignals: Service {
    let reloader: Reloader

    func run() async {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            for await _ in signals {
                // A failure is logged by the reloader, and the running configuration stays.
                _ = try? reloader.reload(trigger: "SIGHUP")
            }
        }
    }
}
