import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// Subjects are told apart by their UTF-8 bytes, not by Unicode canonical equivalence: "\u{212A}ate"
/// (KELVIN SIGN) is not "Kate", and an NFD "José" is not the NFC one. For apps whose subjects are
/// user names, anything else lets one account act on another.
@Suite("identities by their bytes, end to end", .serialized, .ownThreads)
struct IdentityBytesEndToEndTests {
    static let kate = "Kate"
    static let kelvin = "\u{212A}ate"
    static let joseNFC = "Jos\u{E9}"
    static let joseNFD = "Jose\u{301}"

    /// The bytes of a string member of `value`: `JSONValue`'s own `==` compares Swift strings.
    static func bytes(_ value: JSONValue?) -> [UInt8]? {
        value?.stringValue.map { Array($0.utf8) }
    }

    @Test("equivalent subjects are separate users with separate sessions, across a restart")
    func equivalentSubjects() throws {
        // The precondition of the test: Swift does call them equal.
        #expect(Self.kate == Self.kelvin && Self.joseNFC == Self.joseNFD)
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var daemon = try DaemonProcess(directory: directory)
        try daemon.waitUntilReady()
        var connection = try RawConnection(path: daemon.socketPath)

        let kate = try connection.result("session.create", ["sub": .string(Self.kate)])
        let kelvin = try connection.result("session.create", ["sub": .string(Self.kelvin)])
        let nfc = try connection.result("session.create", ["sub": .string(Self.joseNFC)])
        let nfd = try connection.result("session.create", ["sub": .string(Self.joseNFD)])
        _ = try connection.result("user.update", ["sub": .string(Self.kate), "email": "kate@example.com"])

        func check(_ connection: RawConnection) throws {
            for (created, sub) in [(kate, Self.kate), (kelvin, Self.kelvin), (nfc, Self.joseNFC), (nfd, Self.joseNFD)] {
                let got = try connection.result("session.get", ["session": created["session"]!])
                #expect(Self.bytes(got["sub"]) == Array(sub.utf8))
                #expect(Self.bytes(got["user"]?["sub"]) == Array(sub.utf8))
                let listed = try connection.result("session.list", ["sub": .string(sub)])["sessions"]?.arrayValue ?? []
                #expect(listed.compactMap { $0["id"]?.stringValue } == [created["id"]!.stringValue!])
            }
            // Kate's record is Kate's alone: the Kelvin-sign user has no email.
            #expect(try connection.result("user.get", ["sub": .string(Self.kate)])["email"] == "kate@example.com")
            #expect(try connection.result("user.get", ["sub": .string(Self.kelvin)])["email"] == nil)
            #expect(try connection.result("stats")["store"]?["users"] == 4)
        }
        try check(connection)

        // The log replayed, then a snapshot loaded: both keep them apart.
        #expect(try daemon.terminate() == 0)
        daemon = try DaemonProcess(directory: directory)
        try daemon.waitUntilReady()
        connection = try RawConnection(path: daemon.socketPath)
        try check(connection)
        _ = try connection.result("admin.snapshot")
        #expect(try daemon.terminate() == 0)
        daemon = try DaemonProcess(directory: directory)
        try daemon.waitUntilReady()
        connection = try RawConnection(path: daemon.socketPath)
        try check(connection)

        // Revoking all of the Kelvin-sign user's sessions, and deleting that user, leave Kate's.
        #expect(try connection.result("session.revoke_all", ["sub": .string(Self.kelvin)])["revoked"] == 1)
        #expect(try connection.result("user.delete", ["sub": .string(Self.kelvin)])["deleted"] == true)
        let got = try connection.result("session.get", ["session": kate["session"]!])
        #expect(Self.bytes(got["sub"]) == Array(Self.kate.utf8))
        #expect(try connection.result("user.get", ["sub": .string(Self.kate)])["email"] == "kate@example.com")
        #expect(try connection.result("session.revoke_all", ["sub": .string(Self.joseNFD)])["revoked"] == 1)
        #expect(try connection.result("session.get", ["session": nfc["session"]!])["id"] == nfc["id"])
        #expect(try daemon.terminate() == 0)
    }

    @Test("an issuer name in a request is one of the configured ones byte for byte")
    func issuerNames() throws {
        let config = SessionEndToEndTests.config.replacingOccurrences(of: "name = \"corp\"", with: "name = \"caf\u{E9}\"")
        let daemon = try DaemonProcess.start(config: config)
        let connection = try RawConnection(path: daemon.socketPath)
        let created = try connection.result("session.create", ["sub": "a", "issuer": "caf\u{E9}"])
        #expect(Self.bytes(try connection.result("session.get", ["session": created["session"]!])["issuer"]) == Array("caf\u{E9}".utf8))
        // The NFD spelling names no configured issuer: refused, not a second principal of the same issuer.
        #expect(try connection.errorCode("session.create", ["sub": "a", "issuer": "cafe\u{301}"]) == "bad_request")
        #expect(try connection.errorCode("session.list", ["sub": "a", "issuer": "cafe\u{301}"]) == "bad_request")
        #expect(try daemon.terminate() == 0)
    }
}
