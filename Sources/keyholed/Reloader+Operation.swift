import KeyholeProtocol
import KeyholeServer

extension Reloader {
    /// `admin.reload` (`keyhole reload`): what SIGHUP does, answered with what changed, or
    /// `config_invalid` when the file does not load (the running configuration stays).
    var operation: Operation {
        .async { [self] request, _ throws(ProtocolError) in
            if let name = request.args.keys.sorted().first {
                throw .badRequest("admin.reload takes no arguments, got '\(name.prefix(64))'")
            }
            do {
                let outcome = try reload(trigger: "admin.reload")
                return [
                    "applied": .array(outcome.applied.map { .string($0) }),
                    "needs_restart": .array(outcome.needsRestart.map { .string($0) }),
                ]
            } catch {
                throw ProtocolError(code: .configInvalid, message: "the configuration was not reloaded: \(error)")
            }
        }
    }
}
