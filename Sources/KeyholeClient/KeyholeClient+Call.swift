import KeyholeProtocol
import NIOCore

extension KeyholeClient {
    /// One call on its way: its request, its `CallStateMachine`, and the I/O the machine asks for.
    struct Call: Sendable {
        let op: String
        let args: [String: JSONValue]
        let client: KeyholeClient
        let clock = ContinuousClock()
        let deadline: ContinuousClock.Instant?
        var machine: CallStateMachine
        var connection: Connection?

        init(op: String, args: [String: JSONValue], client: KeyholeClient) {
            self.op = op
            self.args = args
            self.client = client
            self.deadline = client.configuration.deadline.map { ContinuousClock.now + $0 }
            self.machine = CallStateMachine(op: op, deadline: deadline, configuration: client.configuration.machine)
        }

        /// The time until the deadline (`nil`: no deadline).
        var timeLeft: Duration? { deadline.map { clock.now.duration(to: $0) } }

        /// Sends the request with a fresh id on `connection` now.
        func start(on connection: Connection) -> EventLoopFuture<SendOutcome> {
            connection.start(id: client.makeID(), op: op, args: args, deadline: deadline)
        }

        /// Does what the machine asks, from `action` on, until the call is over.
        mutating func run(from action: CallStateMachine.Action) async throws(KeyholeClientError) -> Response {
            var action = action
            while true {
                switch action {
                case .connect:
                    if Task.isCancelled {
                        action = machine.cancelled()
                        continue
                    }
                    switch await client.connector.connection(timeout: timeLeft) {
                    case .success(let open):
                        connection = open
                        action = machine.connected(now: clock.now)
                    case .failure(.closed):
                        throw .unavailable("the client is closed")
                    case .failure(.cannotConnect(let reason)):
                        action = machine.connectFailed(reason, now: clock.now)
                    }
                case .send:
                    guard let connection else { preconditionFailure("send before connect") }
                    let outcome = await connection.send(id: client.makeID(), op: op, args: args, deadline: deadline)
                    action = machine.sent(outcome, now: clock.now)
                case .wait(let until):
                    // A cancelled sleep ends at once; the check at .connect then ends the call.
                    try? await clock.sleep(until: until)
                    action = machine.waited(now: clock.now)
                case .finish(let result):
                    return try result.get()
                }
            }
        }
    }
}
