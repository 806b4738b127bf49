import KeyholeProtocol
import Testing

@testable import KeyholeServer

@Suite("Sign in with Apple on the web: pending authorizations under a lock")
struct AppleWebFlowTests {
    func start(_ flow: AppleWebFlow, peer: UInt32 = 1, now: Int64 = 1_000) async throws -> AppleWebFlow.Started {
        try await flow.start(clientID: "com.example.web", redirectURI: "https://example.com/cb", returnTo: "/", peer: peer, now: now, lifetime: 600)
    }

    @Test("a start's secrets are fresh and only their digests are kept; the record serves its own browser once, until it expires")
    func startAndTake() async throws {
        let flow = AppleWebFlow(configuration: .init())
        let started = try await start(flow)
        #expect(Set([started.state, started.nonce, started.binding]).count == 3)
        #expect(started.expiresAt == 1_600)
        let record = try await flow.take(state: started.state, binding: started.binding, now: 1_599).get()
        #expect(record.clientID == "com.example.web" && record.redirectURI == "https://example.com/cb" && record.returnTo == "/")
        #expect(try await flow.take(state: started.state, binding: started.binding, now: 1_599) == .failure(.unknown))

        let late = try await start(flow)
        #expect(try await flow.take(state: late.state, binding: late.binding, now: 1_600) == .failure(.expired))
        let other = try await start(flow)
        #expect(try await flow.take(state: other.state, binding: late.binding, now: 1_000) == .failure(.notThisBrowser))
        #expect(try await flow.take(state: other.state, binding: other.binding, now: 1_000) == .failure(.unknown), "spent by the wrong browser's try")
        #expect(flow.count == 0)
    }

    @Test("expired records are swept by a later start; at the bound in all, a peer with none of its own is refused overloaded")
    func sweepAndBound() async throws {
        let flow = AppleWebFlow(configuration: .init(perPeer: 10, total: 3))
        for peer: UInt32 in 1...3 { _ = try await start(flow, peer: peer) }
        await #expect(throws: ProtocolError(code: .overloaded, message: "")) { try await start(flow, peer: 4) }
        // A peer at the bound gives up its own oldest instead.
        _ = try await start(flow, peer: 1)
        #expect(flow.count == 3)
        // A minute on and past their expiry, the next start sweeps them all out first.
        _ = try await start(flow, peer: 4, now: 1_000 + 600 + AppleWebFlow.sweepInterval)
        #expect(flow.count == 1)
    }
}
