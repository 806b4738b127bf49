import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// apple.sign_in takes its subject from the token: the same bounds as session.create's `sub`
/// argument hold for it, since a user record keeps at most 255 bytes of subject.
@Suite("apple.sign_in bounds, end to end", .serialized, .ownThreads)
struct AppleSignInBoundsTests {
    typealias SignIn = AppleSignInEndToEndTests

    @Test("a token whose sub is longer than 255 bytes is refused with token_claim_invalid, storing nothing; 255 bytes sign in")
    func subjectLength() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try SignIn.start(apple)
        let longest = String(repeating: "s", count: 255)
        let signedIn = try connection.result("apple.sign_in", ["identity_token": .string(apple.identityToken(sub: longest, audience: SignIn.app))])
        #expect(signedIn["session"]?["session"]?.stringValue != nil)

        let tooLong = String(repeating: "s", count: 256)
        let refused = try connection.call("apple.sign_in", ["identity_token": .string(apple.identityToken(sub: tooLong, audience: SignIn.app))])
        #expect(refused["error"]?["code"] == "token_claim_invalid")
        #expect(refused["error"]?["message"]?.stringValue?.contains("sub must be 1 to 255 bytes") == true, "\(refused)")
        // Nothing was stored for the refused ones.
        #expect(try connection.result("stats")["store"]?["users"] == 1)
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }
}
